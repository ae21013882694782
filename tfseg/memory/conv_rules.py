"""The rules that fold what feeds a conv (or a dense or pooling layer) into its twin:
activations, shared ReLUs, concatenations of ReLUs, channel scales; and the lean dilated
depthwise conv."""

import keras

from tfseg.layers import (
    ActivationAveragePooling2D,
    ActivationConv2D,
    ActivationDepthwiseConv2D,
    ActivationMaxPooling2D,
    ActivationSeparableConv2D,
    ReluConv2D,
    ReluDepthwiseConv2D,
)
from tfseg.layers import elementwise
from tfseg.memory.matchers import (activation_chain, depthwise_conv2d, plain_conv, scaled_input,
                                   shared_relus)
from tfseg.memory.plans import DROPS, PASSES, Parts, Scaled
from tfseg.memory.rules import record, rule
from tfseg.memory.segments import producer
from tfseg.memory.twins import DENSE_TWINS, tuned, twin_rule

record("fused", lambda pairs: f"fused {len(pairs)} activation+layer pairs")
record("scaled", lambda pairs: f"folded {len(pairs)} channel scales into convs")
record("separable_layers", lambda names: (
    f"made {len(names)} SeparableConv2D layer{'s' if len(names) != 1 else ''} keep only "
    f"{'their' if len(names) != 1 else 'its'} input"))
record("lean", lambda names: f"made {len(names)} dilated depthwise convs lean")
record("relu_concat", lambda names: (
    f"{len(names)} concatenation{'s' if len(names) != 1 else ''} of ReLUs taken in as parts "
    f"by the convs and pools reading {'them' if len(names) != 1 else 'it'}"))


def take_activation(finding, node, relu_twin, twin):
    """Plans `node`'s twin (`relu_twin` after a plain ReLU) taking in the activation
    [and zero padding] before it, if there is one; returns whether there was."""
    act, pad = activation_chain(finding.graph, node)
    if act is None:
        return False
    finding.claim(act, plan=PASSES, record=("fused", (act.operation.name, node.operation.name)))
    plain = elementwise.is_plain_relu(act.operation)
    config = {} if plain else {"input_activation": elementwise.serialize(act.operation)}
    if pad is not None:
        finding.claim(pad, plan=PASSES)
        config["input_padding"] = pad.operation.padding
    finding.claim(node, twin=relu_twin if plain else twin, config=config)
    return True


@rule("tuned_layers")
def tuned_layers(finding):
    """Says which convs and dense layers keep no twin for their LoRA terms or quantized
    kernel (`twins.tuned`); the rules that would twin them pass them by."""
    kinds = (keras.layers.Conv2D, keras.layers.DepthwiseConv2D, *DENSE_TWINS)
    for node in finding.graph.nodes:
        layer = node.operation
        why = tuned(layer) if type(layer) in kinds else None
        if why is not None and (layer.name, why) not in finding.changes.kept_stock:
            finding.add("kept_stock", (layer.name, why))


@rule("shared_relus", option=("fuse_relu_depthwise", "fuse_relu_conv"))
def shared_relu(finding):
    """A plain ReLU read by several convs (and ReLUs, and Adds a norm folds) is not made:
    each reader takes it in (`matchers.shared_relus`)."""
    options = finding.options
    found = shared_relus(finding.graph, finding.taken, options.fuse_relu_depthwise,
                         options.fuse_relu_conv,
                         fold_adds=options.inplace_norm and options.fold_residual)
    for relu, (twins, adds) in found.items():
        finding.claim(relu, plan=PASSES)
        for add in adds:
            finding.claim(add, fold_relu=True)
        for conv, cls in twins.items():
            finding.claim(conv, twin=cls, record=("fused", (relu.operation.name,
                                                           conv.operation.name)))


# The twins of a concatenation's readers, which take in the ReLUs before it.
_PARTS_TWINS = {keras.layers.Conv2D: ReluConv2D, keras.layers.MaxPooling2D: ActivationMaxPooling2D,
                keras.layers.AveragePooling2D: ActivationAveragePooling2D}
_POOLS = (keras.layers.MaxPooling2D, keras.layers.AveragePooling2D)


def relu_concat(graph, node, taken):
    """(the plain ReLU nodes, its readers) where `node` is a channels-last `Concatenate`
    of plain ReLUs that feed only it, read only by convs (`plain_conv` Conv2D) and max
    or average pools, none of them taken by another rule; else None. Inception's
    blocks end so: each branch's norm -> ReLU, concatenated, read by the next block's
    1x1 convs and pools."""
    layer = node.operation
    if (type(layer) is not keras.layers.Concatenate or layer.axis not in (-1, 3)
            or graph.shared(layer) or id(node) in taken or len(node.outputs) != 1
            or id(node.outputs[0]) in graph.outputs or len(node.outputs[0].shape) != 4):
        return None
    relus = [producer(t) for t in node.input_tensors]
    if len({id(r) for r in relus}) != len(relus) or any(
            r.is_input or not elementwise.is_plain_relu(r.operation) or id(r) in taken
            or graph.shared(r.operation) or graph.only_consumer(r) is not node for r in relus):
        return None
    readers = graph.consumers[id(node.outputs[0])]
    for reader in readers:
        kind = type(reader.operation)
        if id(reader) in taken or graph.shared(reader.operation):
            return None
        if kind in _POOLS and reader.operation.data_format == "channels_last":
            continue
        if plain_conv(graph, reader) is not keras.layers.Conv2D:
            return None
    return (relus, readers) if readers else None


@rule("relu_concat", option="fuse_relu_conv")
def relu_concat_readers(finding):
    """A `Concatenate` of plain ReLUs read only by convs and pools
    (`relu_concat`): each reader takes the ReLUs' inputs, the outputs of the
    norms before them, which those keep anyway, and joins and activates them itself.
    Neither the ReLUs' outputs nor the concatenation is kept (stock keeps both)."""
    for node in finding.open_nodes():
        found = relu_concat(finding.graph, node, finding.taken)
        if found is None or any(r.operation.name in finding.replaced for r in found[1]):
            continue
        relus, readers = found
        for relu in relus:
            finding.claim(relu, plan=PASSES)
        finding.claim(node, plan=DROPS, record=("relu_concat", node.operation.name))
        parts = [int(t.shape[-1]) for t in node.input_tensors]
        for reader in readers:
            finding.claim(reader, twin=_PARTS_TWINS[type(reader.operation)], plan=Parts(node),
                          config={"input_activation": "relu", "input_parts": parts})


@rule("activation_max_pooling", option="fuse_relu_conv")
def activation_max_pooling(finding):
    """Activation -> MaxPooling2D (ResNet's stem) as `ActivationMaxPooling2D`."""
    for node in finding.open_nodes():
        layer = node.operation
        if (type(layer) is keras.layers.MaxPooling2D and not finding.graph.shared(layer)
                and layer.data_format == "channels_last"):
            take_activation(finding, node, ActivationMaxPooling2D, ActivationMaxPooling2D)


@rule("activation_dense", option="fuse_relu_conv")
def activation_dense(finding):
    """Elementwise activation -> stock `Dense`/`EinsumDense` (not LoRA or quantized) as
    its `DENSE_TWINS` twin: a transformer MLP's GELU output is not kept."""
    for node in finding.open_nodes():
        layer = node.operation
        if type(layer) not in DENSE_TWINS or finding.graph.shared(layer) or tuned(layer):
            continue
        act, pad = activation_chain(finding.graph, node)
        if act is None or pad is not None:
            continue
        finding.claim(act, plan=PASSES, record=("fused", (act.operation.name, layer.name)))
        finding.claim(layer, twin=DENSE_TWINS[type(layer)],
                      config={"input_activation": elementwise.serialize(act.operation)})


@rule("separable_layers", option="fuse_separable")
def separable_layers(finding):
    """[Activation [-> ZeroPadding2D] ->] `SeparableConv2D` (Xception's, as one layer) as
    `ActivationSeparableConv2D`, which keeps neither the activation's output nor the
    depthwise conv's."""
    for node in finding.open_nodes():
        layer = node.operation
        if (type(layer) is not keras.layers.SeparableConv2D or finding.graph.shared(layer)
                or layer.data_format != "channels_last"):
            continue
        finding.add("separable_layers", layer.name)
        if not take_activation(finding, node, ActivationSeparableConv2D,
                               ActivationSeparableConv2D):
            finding.claim(layer, twin=ActivationSeparableConv2D,
                          config={"input_activation": None})


@rule("activation_depthwise", option="fuse_relu_depthwise")
def activation_depthwise(finding):
    """Activation [-> ZeroPadding2D] -> DepthwiseConv2D as `ReluDepthwiseConv2D` or
    `ActivationDepthwiseConv2D`."""
    for node in finding.open_nodes():
        if plain_conv(finding.graph, node) is keras.layers.DepthwiseConv2D:
            take_activation(finding, node, ReluDepthwiseConv2D, ActivationDepthwiseConv2D)


@rule("activation_conv", option="fuse_relu_conv")
def activation_conv(finding):
    """Activation [-> ZeroPadding2D] -> Conv2D (also one grouped per channel: a depthwise
    conv) as `ReluConv2D` or `ActivationConv2D`."""
    for node in finding.open_nodes():
        if (plain_conv(finding.graph, node) is keras.layers.Conv2D
                or depthwise_conv2d(finding.graph, node)):
            take_activation(finding, node, ReluConv2D, ActivationConv2D)


@rule("scaled_conv", option="fuse_relu_conv")
def scaled_conv(finding):
    """Squeeze-and-excitation's `Multiply([x, s])` -> Conv2D as `ActivationConv2D(x,
    scale=s)`, which does not keep the product."""
    for node in finding.open_nodes():
        if plain_conv(finding.graph, node) is not keras.layers.Conv2D:
            continue
        found = scaled_input(finding.graph, node)
        if found is not None:
            multiply, full, scale = found
            finding.claim(multiply, plan=DROPS,
                          record=("scaled", (multiply.operation.name, node.operation.name)))
            finding.claim(node, twin=ActivationConv2D, config={"input_activation": None},
                          plan=Scaled(full, scale))


# Every other dilated DepthwiseConv2D as `LeanDepthwiseConv2D`: `TWINS`' row.
twin_rule("lean_dilated", "lean")
