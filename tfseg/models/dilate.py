"""DeepLab's atrous trick on any functional Keras model: the downsampling past an
output stride becomes dilation, with the same weights.

Chen et al., "Rethinking Atrous Convolution for Semantic Image Segmentation", 2017,
https://arxiv.org/abs/1706.05587 (Section 3.1), as research/deeplab's
`resnet_utils.stack_blocks_dense` does it while building a network; here it is a
graph transform of a built one, driven by each layer's strides and the strides of
the tensors it reads, never by layer names.
"""

import keras

from tfseg import keras_graph
from tfseg.memory.patterns import Graph

# The layers that downsample by their `strides` (transposed convs upsample: not these).
DOWNSAMPLING = (keras.layers.Conv2D, keras.layers.DepthwiseConv2D, keras.layers.SeparableConv2D,
                keras.layers.MaxPooling2D, keras.layers.AveragePooling2D)
DILATABLE = (keras.layers.Conv2D, keras.layers.DepthwiseConv2D, keras.layers.SeparableConv2D)


def _window(layer):
    return layer.kernel_size if isinstance(layer, DILATABLE) else layer.pool_size


def dilation_changes(model, output_stride):
    """{layer name: config changes} that take `model` to `output_stride`.

    Each tensor's stride is the product of the strides of the `DOWNSAMPLING` layers
    on the way to it (the largest over a layer's inputs). A layer that would take a
    tensor past `output_stride` gets stride 1. A conv with a kernel larger than 1
    that read a tensor at stride s > `output_stride` gets its dilation rate
    multiplied by s / `output_stride`, so it sees the same context on the finer
    map. A 'valid' layer whose window or stride changed must still give the
    stride-1 'same' size: the `ZeroPadding2D` that feeds only it (as
    keras.applications pads before a stride-2 conv) is set to the padding 'same'
    would use, or, with none, the layer's padding becomes 'same'.
    Raises a ValueError for a layer shared by nodes that need different changes.
    """
    graph = Graph(model)
    strides = {id(tensor): 1 for tensor in model.inputs}
    changes = {}
    for node in graph.nodes:
        layer = node.operation
        into = max((strides.get(id(t), 1) for t in node.input_tensors), default=1)
        own = max(layer.strides) if isinstance(layer, DOWNSAMPLING) else 1
        for tensor in node.outputs:
            strides[id(tensor)] = into * own
        change = {}
        if own > 1 and into * own > output_stride:
            change["strides"] = (1, 1)
        rate = into // output_stride
        if isinstance(layer, DILATABLE) and rate > 1 and max(layer.kernel_size) > 1:
            change["dilation_rate"] = tuple(r * rate for r in layer.dilation_rate)
        if change and layer.padding == "valid":
            rates = change.get("dilation_rate", getattr(layer, "dilation_rate", (1, 1)))
            pads = [(k - 1) * r for k, r in zip(_window(layer), rates)]
            feeder = graph.sole_feeder(node)
            if feeder is not None and type(feeder.operation) is keras.layers.ZeroPadding2D:
                _record(changes, feeder.operation, {
                    "padding": tuple((p // 2, p - p // 2) for p in pads)})
            elif max(pads) > 0:
                change["padding"] = "same"
        if change:
            _record(changes, layer, change)
    return changes


def _record(changes, layer, change):
    if changes.setdefault(layer.name, change) != change:
        raise ValueError(f"layer {layer.name!r} is shared by nodes that need different "
                         f"changes ({changes[layer.name]} and {change}): cannot dilate it")


def rebuild(model, changes=None, names=None):
    """A new functional model: every layer of `model` rebuilt from its config, updated
    by `changes` ({layer name: config entries}) and renamed by `names` ({layer name:
    new name}), with the old layer's weights (the changes must keep their shapes).

    Operations that are not layers (`keras.ops.flip(x)` in a graph) are kept; a
    nested model is rebuilt as one layer, unchanged inside.
    """
    changes, names, new_layers = changes or {}, names or {}, {}

    def twin(layer):
        if layer not in new_layers:
            if isinstance(layer, keras.layers.Layer):
                config = {**layer.get_config(), **changes.get(layer.name, {}),
                          "name": names.get(layer.name, layer.name)}
                new_layers[layer] = type(layer).from_config(config)
            else:
                new_layers[layer] = layer
        return new_layers[layer]

    tensors = {id(t): keras.Input(batch_shape=t.shape, dtype=t.dtype,
                                  name=keras_graph.producer(t).name) for t in model.inputs}
    inputs = keras.tree.map_structure(lambda t: tensors[id(t)], keras_graph.input_structure(model))
    for node in Graph(model).nodes:
        args, kwargs = node.arguments.fill_in(tensors)
        outputs = twin(node.operation)(*args, **kwargs)
        for old, new in zip(node.outputs, keras.tree.flatten(outputs)):
            tensors[id(old)] = new
    outputs = keras.tree.map_structure(lambda t: tensors[id(t)], keras_graph.output_structure(model))
    new_model = keras.Model(inputs, outputs, name=model.name)
    for old, new in new_layers.items():
        if new is not old:
            new.set_weights(old.get_weights())
    return new_model


def dilate(model, output_stride, names=None):
    """`model` (functional, its downsampling by strided convs and pools) with its
    features past `output_stride` computed at `output_stride` by dilation
    (`dilation_changes`): same variables (names, shapes, values), finer maps. At
    the model's own output stride, or a coarser one, an unchanged copy.
    `names`: as `rebuild`'s."""
    return rebuild(model, dilation_changes(model, output_stride), names)
