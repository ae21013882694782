"""Patterns across a nested model's boundary, where a 1x1 conv takes in the resizing
next to it.

- The upsampling that ends a backbone and the 1x1 conv after it, in the task model
  (keras-hub's DeepLabV3: its backbone upsamples the 256-channel head to the image
  size, the segmenter's classifier conv reads it). The twin
  (`tfseg.layers.UpsampledConv2D`) convolves before it upsamples, so the nested model
  is rewritten without its last upsampling: in the rewritten model it returns the map
  before the upsampling.
- A concatenation of resized maps that a nested model reads, which starts with a 1x1
  conv (keras-hub's SegFormer: four stages resized to the largest, concatenated, and
  a `Sequential` conv -> norm -> ReLU). The twin (`tfseg.layers.ResizedConcatConv2D`)
  convolves each map and resizes the results, so the nested model is rewritten without
  its first conv: in the rewritten model it starts from the conv's output.
"""

import keras

from tfseg import keras_graph
from tfseg.layers.upsampled_conv import INTERPOLATIONS
from tfseg.memory.segments import producer
from tfseg.memory.twins import tuned


def _is_one_by_one(layer):
    return (type(layer) is keras.layers.Conv2D and tuple(layer.kernel_size) == (1, 1)
            and tuple(layer.strides) == (1, 1) and tuple(layer.dilation_rate) == (1, 1)
            and layer.groups == 1 and layer.data_format == "channels_last"
            and not tuned(layer))


def _called_once(graph, node):
    """`node` where it calls a nested model that is called nowhere else, else None."""
    if (node is None or not isinstance(node.operation, keras.Model)
            or graph.shared(node.operation) or len(keras_graph.call_nodes(node.operation)) != 1):
        return None
    return node


def final_upsampling(model):
    """The node of the `UpSampling2D` (bilinear or nearest, channels last, called once)
    that makes a functional `model`'s only output, else None. (Nothing else in the model
    reads it: a node no output needs is not in the model.)"""
    if not keras_graph.has_graph(model) or len(model.outputs) != 1:
        return None
    output = model.outputs[0]
    node = producer(output)
    layer = node.operation
    if (node.is_input or type(layer) is not keras.layers.UpSampling2D
            or layer.interpolation not in INTERPOLATIONS or layer.data_format != "channels_last"
            or len(keras_graph.call_nodes(layer)) != 1):
        return None
    return node


def upsampled_conv(graph, conv):
    """(nested model's node, its final upsampling's node) when `conv` (a Conv2D node) is
    a 1x1 conv that alone reads a nested functional model's output made by a final
    upsampling (`final_upsampling`), both called once, else None."""
    if not _is_one_by_one(conv.operation) or graph.shared(conv.operation):
        return None
    nested = _called_once(graph, graph.sole_feeder(conv))
    if nested is None:
        return None
    upsampling = final_upsampling(nested.operation)
    return None if upsampling is None else (nested, upsampling)


def _graph_of(model):
    """A nested model's functional graph: its own, or a built `Sequential`'s."""
    if isinstance(model, keras.Sequential):
        return getattr(model, "_functional", None)
    return model if keras_graph.has_graph(model) else None


def first_conv(model):
    """The 1x1 `Conv2D` (called once) that alone reads a nested functional or
    `Sequential` model's only input, and reads nothing else, where neither that input
    nor the conv's output is an output of the model; else None."""
    graph = _graph_of(model)
    if graph is None or len(graph.inputs) != 1:
        return None
    start = graph.inputs[0]
    readers = [node for node in keras_graph.nodes_in_order(graph, inputs=True)
               if any(t is start for t in node.input_tensors)]
    outputs = {id(t) for t in graph.outputs}
    if (len(readers) != 1 or len(readers[0].input_tensors) != 1 or id(start) in outputs
            or id(readers[0].outputs[0]) in outputs):
        return None  # the model without the conv would not start from its output
    conv = readers[0].operation
    return conv if _is_one_by_one(conv) and len(keras_graph.call_nodes(conv)) == 1 else None


def _resize_of(node):
    """[height, width, interpolation] of a `Resizing` node that only resizes (no crop,
    pad or antialias; bilinear or nearest; channels last); None where the resize keeps
    the size (the identity); False for any other node."""
    layer = node.operation
    if (node.is_input or type(layer) is not keras.layers.Resizing
            or layer.interpolation not in INTERPOLATIONS or layer.crop_to_aspect_ratio
            or layer.pad_to_aspect_ratio or layer.antialias
            or layer.data_format != "channels_last"):
        return False
    if tuple(node.input_tensors[0].shape[1:3]) == (layer.height, layer.width):
        return None
    return [layer.height, layer.width, layer.interpolation]


def resized_concat_conv(graph, node):
    """(the nested model's node, its first conv, each part's size for
    `ResizedConcatConv2D`, the `Resizing` nodes the twin takes in) when `node` is a
    channels-last `Concatenate` that only a nested model (called once) reads, that model
    starts with a 1x1 conv (`first_conv`), and some parts are `Resizing` outputs that
    only the concatenation reads; else None."""
    layer = node.operation
    if (type(layer) is not keras.layers.Concatenate or layer.axis not in (-1, 3)
            or graph.shared(layer)):
        return None
    nested = _called_once(graph, graph.only_consumer(node))
    if nested is None:
        return None
    conv = first_conv(nested.operation)
    if conv is None:
        return None
    sizes, resizes = [], []
    for tensor in node.input_tensors:
        part = producer(tensor)
        size = _resize_of(part)
        if size is False or graph.only_consumer(part) is not node:
            sizes.append(None)
            continue
        sizes.append(size)
        resizes.append(part)
    return (nested, conv, sizes, resizes) if resizes else None
