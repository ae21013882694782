"""keras-hub's blocks whose `call` the rewrite knows, registered in `tfseg.memory.blocks`.

Imported by `tfseg/memory/__init__.py`'s post-import hook once keras-hub is (nothing
else imports it, and `blocks` knows nothing of it); each entry names the file of
keras-hub 0.32 it reads. A keras-hub whose classes moved registers nothing (their blocks
stay stock); one whose attributes changed keeps the pair stock and says why
(`tfseg.memory.inside`); one whose block computes otherwise fails
`tests/memory/test_hub.py` (the rewritten model's outputs and gradients against stock).
"""

import logging

import keras

from tfseg.layers import ActivationDense
from tfseg.layers.elementwise import ELEMENTWISE_FUNCTIONS
from tfseg.memory.blocks import register_block, register_rebuild, register_twin

try:
    from keras_hub.src.layers.modeling.transformer_encoder import TransformerEncoder
    from keras_hub.src.models.deit.deit_layers import DeiTEncoder, DeiTEncoderBlock
    from keras_hub.src.models.mit.mit_layers import (HierarchicalTransformerEncoder, MixFFN,
                                                     SegFormerMultiheadAttention)
    from keras_hub.src.models.swin_transformer.swin_transformer_layers import WindowAttention
    from keras_hub.src.models.vit.vit_layers import MLP
    from keras_hub.src.models.vit_det.vit_layers import MLP as ViTDetMLP
    from keras_hub.src.models.vit_det.vit_layers import MultiHeadAttentionWithRelativePE

    from tfseg.layers.hub import (LeanMixFFN, LeanRelativeAttention, LeanSegFormerAttention,
                                  LeanViTDetMLP, LeanViTMLP, LeanWindowAttention)
except ImportError as error:  # another keras-hub: its blocks stay stock
    logging.getLogger("tfseg.memory").info("keras-hub's blocks are not registered: %s",
                                           error)
    TransformerEncoder = MLP = HierarchicalTransformerEncoder = None
    DeiTEncoder = DeiTEncoderBlock = WindowAttention = MultiHeadAttentionWithRelativePE = None
    ViTDetMLP = None
    MixFFN = SegFormerMultiheadAttention = None


@register_twin(MLP, "fuse_relu_conv")
def _vit_mlp(layer):
    """ViT's MLP (`models/vit/vit_layers.py`): dense_1 (GELU) -> dropout -> dense_2 ->
    dropout; the GELU and the first dropout go into dense_2, the mask replayed from its
    seed. At rate 1 stock's dropout returns zeros, which the twin does not draw."""
    if layer.dropout_rate >= 1:
        return None, {}, f"dropout {layer.dropout_rate:g} between its two Dense layers"
    activation = keras.activations.serialize(layer.dense_1.activation)
    return LeanViTMLP, {
        "dense_1": (keras.layers.Dense, (("activation", keras.activations.linear),)),
        "dense_2": (ActivationDense, (("input_activation", activation),)),
    }, None


@register_rebuild(MLP)
def _vit_mlp_copy(layer):
    """ViT's MLP has no config (`get_config` is not implemented): a copy from its
    constructor's arguments, which it keeps as attributes."""
    return type(layer)(layer.hidden_dim, layer.mlp_dim, use_bias=layer.use_bias,
                       dropout_rate=layer.dropout_rate, name=layer.name,
                       dtype=layer.dtype_policy)


@register_rebuild(DeiTEncoder)
def _deit_encoder(layer):
    """DeiT's encoder (`models/deit/deit_layers.py`): its config writes `key_dim`, an
    attribute it never sets, so it is copied from its constructor's arguments."""
    return type(layer)(layer.num_layers, layer.num_heads, layer.hidden_dim,
                       layer.intermediate_dim, use_mha_bias=layer.use_mha_bias,
                       dropout_rate=layer.dropout_rate,
                       attention_dropout=layer.attention_dropout,
                       layer_norm_epsilon=layer.layer_norm_epsilon, name=layer.name,
                       dtype=layer.dtype_policy)


@register_block(DeiTEncoderBlock)
def _deit_block(layer):
    """DeiT's block: the MLP's Dense (GELU) feeds the output layer's Dense alone."""
    return [(("mlp", "dense"), ("output_layer", "dense"))], None


@register_block(TransformerEncoder)
def _transformer_encoder(layer):
    """keras-hub's `TransformerEncoder` (`layers/modeling/transformer_encoder.py`): the
    feedforward's intermediate Dense (its activation) feeds its output Dense alone."""
    return [("_feedforward_intermediate_dense", "_feedforward_output_dense")], None


@register_rebuild(HierarchicalTransformerEncoder)
def _mit_block(layer):
    """MiT's block (`models/mit/mit_layers.py`): its config writes `drop_prop` and
    `mlp` where its constructor takes `drop_prob` and builds the MLP itself; its
    attention's two dropout rates are fixed there, so a rate set since is copied."""
    copy = type(layer)(layer.project_dim, layer.num_heads, sr_ratio=layer.attn.sr_ratio,
                       drop_prob=layer.drop_prop, layer_norm_epsilon=layer.norm1.epsilon,
                       name=layer.name, dtype=layer.dtype_policy)
    for attribute in ("dropout", "proj_drop"):
        getattr(copy.attn, attribute).rate = getattr(layer.attn, attribute).rate
    return copy


@register_twin(MixFFN, "fuse_relu_conv")
def _mix_ffn(layer):
    """MixFFN: fc1 -> depthwise conv -> GELU (tanh) -> fc2; the GELU goes into fc2."""
    return LeanMixFFN, {"fc2": (ActivationDense, (("input_activation", "gelu_tanh"),))}, None


@register_twin(SegFormerMultiheadAttention, "lean_attention")
def _segformer_attention(layer):
    """SegFormer's attention: the probabilities are recomputed, their dropout replayed."""
    return LeanSegFormerAttention, {}, None


@register_twin(MultiHeadAttentionWithRelativePE, "lean_attention")
def _relative_attention(layer):
    """SAM's (ViTDet's) attention: the probabilities recomputed, the relative positions
    added as rows and columns."""
    return LeanRelativeAttention, {}, None


@register_twin(WindowAttention, "lean_attention")
def _window_attention(layer):
    """Swin's window attention: the probabilities recomputed, their dropout replayed."""
    return LeanWindowAttention, {}, None


@register_rebuild(WindowAttention)
def _window_attention_copy(layer):
    """Swin's window attention: its config writes settings its constructor does not
    take (`win_h`, `attn_dim`), so it is copied from its arguments."""
    return type(layer)(layer.dim, layer.num_heads, head_dim=layer.head_dim,
                       window_size=layer.window_size, qkv_bias=layer.qkv_bias,
                       qk_scale=layer.scale, attention_dropout=layer.attn_drop_rate,
                       proj_drop=layer.proj_drop_rate, name=layer.name,
                       dtype=layer.dtype_policy)


@register_twin(ViTDetMLP, "fuse_relu_conv")
def _vitdet_mlp(layer):
    """SAM's (ViTDet's) MLP: a Sequential of Dense -> Activation -> Dense; the activation
    goes into the second Dense."""
    parts = layer.dense_net.layers
    kinds = [type(part) for part in parts]
    if (kinds != [keras.layers.Dense, keras.layers.Activation, keras.layers.Dense]
            or parts[0].activation is not keras.activations.linear
            or parts[1].activation not in ELEMENTWISE_FUNCTIONS):
        return None, {}, "its MLP is not Dense -> an elementwise Activation -> Dense"
    activation = keras.activations.serialize(parts[1].activation)
    return LeanViTDetMLP, {
        ("dense_net", "layers", 2): (ActivationDense, (("input_activation", activation),))
    }, None
