"""A pattern across a nested model's boundary: the upsampling that ends a backbone and
the 1x1 conv after it, in the task model (keras-hub's DeepLabV3: its backbone upsamples
the 256-channel head to the image size, the segmenter's classifier conv reads it).

The twin (`tfseg.layers.UpsampledConv2D`) convolves before it upsamples, so the nested
model is rewritten without its last upsampling and the conv takes it in: the nested
model in the rewritten model then returns the map before the upsampling.
"""

import keras

from tfseg.layers.upsampled_conv import INTERPOLATIONS
from tfseg.memory.segments import producer


def _is_one_by_one(layer):
    return (type(layer) is keras.layers.Conv2D and tuple(layer.kernel_size) == (1, 1)
            and tuple(layer.strides) == (1, 1) and tuple(layer.dilation_rate) == (1, 1)
            and layer.groups == 1 and layer.data_format == "channels_last"
            and not getattr(layer, "lora_enabled", False)
            and not getattr(layer, "quantization_mode", None))


def final_upsampling(model):
    """The node of the `UpSampling2D` (bilinear or nearest, channels last, called once)
    that makes a functional `model`'s only output, else None. (Nothing else in the model
    reads it: a node no output needs is not in the model.)"""
    if not hasattr(model, "_nodes_by_depth") or len(model.outputs) != 1:
        return None
    output = model.outputs[0]
    node = producer(output)
    layer = node.operation
    if (node.is_input or type(layer) is not keras.layers.UpSampling2D
            or layer.interpolation not in INTERPOLATIONS or layer.data_format != "channels_last"
            or len(layer._inbound_nodes) != 1):
        return None
    return node


def upsampled_conv(graph, conv):
    """(nested model's node, its final upsampling's node) when `conv` (a Conv2D node) is
    a 1x1 conv that alone reads a nested functional model's output made by a final
    upsampling (`final_upsampling`), both called once, else None."""
    if not _is_one_by_one(conv.operation) or graph.shared(conv.operation):
        return None
    nested = graph.sole_feeder(conv)
    if (nested is None or not isinstance(nested.operation, keras.Model)
            or graph.shared(nested.operation) or len(nested.operation._inbound_nodes) != 1):
        return None
    upsampling = final_upsampling(nested.operation)
    return None if upsampling is None else (nested, upsampling)
