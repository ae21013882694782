"""tfseg layers: resize and the memory-saving twins of stock Keras compositions.

`tfseg.layers.hub` holds the twins of keras-hub's blocks; it imports keras-hub, which is
optional, so it is not imported here (`tfseg.memory.hub_blocks` imports it)."""

from tfseg.layers.inplace_norm import GAMMA_EPSILON, inplace_batch_norm, inplace_group_norm
from tfseg.layers.norm_layers import InplaceBatchNormalization, InplaceGroupNormalization
from tfseg.layers.recompute import Recompute
from tfseg.layers.branches import SerialBranches
from tfseg.layers.keep_input import lean_avg_pool, lean_conv, lean_max_pool
from tfseg.layers.fused_conv import (ActivationConv2D, ActivationDepthwiseConv2D,
                                     LeanDepthwiseConv2D, ReluConv2D, ReluDepthwiseConv2D)
from tfseg.layers.fused_separable import ActivationSeparableConv2D
from tfseg.layers.fused_pool import ActivationAveragePooling2D, ActivationMaxPooling2D
from tfseg.layers.layer_norm import (InplaceLayerNormalization, InplaceRMSNormalization,
                                     inplace_layer_norm)
from tfseg.layers.fused_dense import ActivationDense, ActivationEinsumDense
from tfseg.layers.attention import LeanMultiHeadAttention, lean_attention
from tfseg.layers.resize import ResizeLike
from tfseg.layers.resized_loss import LogitsResize, resized_cross_entropy
from tfseg.layers.upsampled_conv import UpsampledConv2D
from tfseg.layers.concat_conv import ResizedConcatConv2D
from tfseg.layers.class_shards import ClassShards, ShardedLogits, shard_bounds

__all__ = [
    "ActivationAveragePooling2D",
    "ActivationConv2D",
    "ActivationDense",
    "ActivationDepthwiseConv2D",
    "ActivationEinsumDense",
    "ActivationMaxPooling2D",
    "ActivationSeparableConv2D",
    "ClassShards",
    "GAMMA_EPSILON",
    "InplaceBatchNormalization",
    "InplaceGroupNormalization",
    "InplaceLayerNormalization",
    "InplaceRMSNormalization",
    "LeanDepthwiseConv2D",
    "LeanMultiHeadAttention",
    "LogitsResize",
    "Recompute",
    "ReluConv2D",
    "ReluDepthwiseConv2D",
    "ResizeLike",
    "ResizedConcatConv2D",
    "SerialBranches",
    "ShardedLogits",
    "UpsampledConv2D",
    "inplace_batch_norm",
    "inplace_group_norm",
    "inplace_layer_norm",
    "lean_attention",
    "lean_avg_pool",
    "lean_conv",
    "lean_max_pool",
    "resized_cross_entropy",
    "shard_bounds",
]
