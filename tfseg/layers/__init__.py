"""tfseg layers: resize and the memory-saving twins of stock Keras compositions."""

from tfseg.layers.inplace_norm import (
    GAMMA_EPSILON,
    InplaceBatchNormalization,
    InplaceGroupNormalization,
    inplace_batch_norm,
    inplace_group_norm,
)
from tfseg.layers.recompute import Recompute
from tfseg.layers.relu_depthwise import ReluDepthwiseConv2D, relu_depthwise_conv2d
from tfseg.layers.resize import ResizeLike

__all__ = [
    "GAMMA_EPSILON",
    "InplaceBatchNormalization",
    "InplaceGroupNormalization",
    "Recompute",
    "ReluDepthwiseConv2D",
    "ResizeLike",
    "inplace_batch_norm",
    "inplace_group_norm",
    "relu_depthwise_conv2d",
]
