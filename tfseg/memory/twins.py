"""Which twin a stock layer takes, one for one: the tables the rewrite's rules share.

Exact stock classes only: a subclass may change the maths.
"""

import keras

from tfseg.layers import (
    ActivationDense,
    ActivationEinsumDense,
    InplaceBatchNormalization,
    InplaceGroupNormalization,
    InplaceLayerNormalization,
    InplaceRMSNormalization,
    LeanMultiHeadAttention,
    ReluConv2D,
    ReluDepthwiseConv2D,
)

# Channel norms -> their output-only twins; the norm a separable conv's chain may hold.
NORM_TWINS = {
    keras.layers.BatchNormalization: InplaceBatchNormalization,
    keras.layers.GroupNormalization: InplaceGroupNormalization,
}
# Dense layers -> the twin that takes in the activation before them.
DENSE_TWINS = {keras.layers.Dense: ActivationDense,
               keras.layers.EinsumDense: ActivationEinsumDense}


def stateless_twin(layer):
    """(the stateless twin class of a stock norm or attention layer, or None; why a
    layer of such a class keeps no twin, or None)."""
    kind = type(layer)
    if kind is keras.layers.LayerNormalization:
        if layer.rms_scaling:
            return None, None
        if layer.scale and isinstance(layer.gamma_initializer, keras.initializers.Zeros):
            # Its output-only backward divides by gamma: it would start at the guard.
            return None, "gamma starts at zero"
        return InplaceLayerNormalization, None
    if kind is keras.layers.MultiHeadAttention:
        return LeanMultiHeadAttention, None
    if kind is keras.layers.RMSNormalization:
        return InplaceRMSNormalization, None
    return NORM_TWINS.get(kind), None


def fusable_conv(graph, layer, fuse_relu_depthwise, fuse_relu_conv):
    """The twin that can take a ReLU into `layer`, a conv called once in `graph`
    (`tfseg.memory.graph.Graph`), or None."""
    if type(layer) not in (keras.layers.DepthwiseConv2D, keras.layers.Conv2D):
        return None
    if graph.shared(layer) or layer.data_format != "channels_last" or tuned(layer):
        return None
    if type(layer) is keras.layers.DepthwiseConv2D:
        return ReluDepthwiseConv2D if fuse_relu_depthwise else None
    return ReluConv2D if fuse_relu_conv and getattr(layer, "groups", 1) == 1 else None


def tuned(layer):
    """Why `layer` keeps no twin although its class has one: LoRA terms or a quantized
    kernel, which a twin built from its config would leave out; None where it has
    neither."""
    if getattr(layer, "lora_enabled", False):
        return "LoRA-enabled: a twin would drop its LoRA terms"
    mode = getattr(layer, "quantization_mode", None)
    if mode:
        return f"quantized ({mode}): a twin would drop its quantized kernel"
    return None
