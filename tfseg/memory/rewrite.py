"""Rewrite any functional Keras model to use the memory-saving twins, keeping its weights."""

import collections
import dataclasses
import logging

import keras

from tfseg.layers import (
    InplaceBatchNormalization,
    InplaceGroupNormalization,
    LeanDepthwiseConv2D,
    Recompute,
    ReluConv2D,
    ReluDepthwiseConv2D,
)

log = logging.getLogger("tfseg.memory")

# Exact stock classes only: a subclass may change the maths.
_NORM_TWINS = {
    keras.layers.BatchNormalization: InplaceBatchNormalization,
    keras.layers.GroupNormalization: InplaceGroupNormalization,
}


@dataclasses.dataclass(frozen=True)
class Segment:
    """A block to recompute: every layer after `start` up to and including `end`.

    `start` is the layer whose output is the block's only input; `end` makes its
    only output. No tensor inside the block may be used outside it.
    """

    name: str
    start: str
    end: str


@dataclasses.dataclass
class Plan:
    """What `rewrite` changes, by layer name."""

    fused: list = dataclasses.field(default_factory=list)  # (relu, conv) pairs
    lean: list = dataclasses.field(default_factory=list)  # dilated depthwise convs
    inplace: list = dataclasses.field(default_factory=list)  # norm layers
    recomputed: list = dataclasses.field(default_factory=list)  # segment names
    replacements: dict = dataclasses.field(default_factory=dict, repr=False)
    skipped: set = dataclasses.field(default_factory=set, repr=False)  # ReLU/pad nodes

    def __str__(self):
        return (
            f"fused {len(self.fused)} ReLU+conv pairs, made {len(self.lean)} dilated depthwise "
            f"convs lean and {len(self.inplace)} norms output-only, recomputing "
            f"{len(self.recomputed)} blocks"
        )


def _is_plain_relu(layer):
    if type(layer) is keras.layers.ReLU:
        cfg = layer.get_config()
        return cfg["max_value"] is None and not cfg["negative_slope"] and not cfg["threshold"]
    # ReLU6 and leaky ReLU are not ReLU: their masks differ, so they stay.
    return type(layer) is keras.layers.Activation and layer.activation is keras.activations.relu


class _Graph:
    def __init__(self, model):
        self.model = model
        self.nodes = [
            node
            for depth in sorted(model._nodes_by_depth, reverse=True)
            for node in model._nodes_by_depth[depth]
            if node.operation is not None and not node.is_input
        ]
        self.consumers = collections.defaultdict(list)
        for node in self.nodes:
            for tensor in node.input_tensors:
                self.consumers[id(tensor)].append(node)
        self.outputs = {id(t) for t in model.outputs}

    def only_consumer(self, node):
        """The single node that uses `node`'s single output, else None."""
        if len(node.outputs) != 1 or id(node.outputs[0]) in self.outputs:
            return None
        users = self.consumers[id(node.outputs[0])]
        return users[0] if len(users) == 1 else None


def _relu_chain(graph, node):
    """The ReLU [and ZeroPadding2D] nodes, in either order, that feed only `node`."""
    relu = pad = None
    current = node
    while len(current.input_tensors) == 1:
        history = current.input_tensors[0]._keras_history
        parent = history.operation._inbound_nodes[history.node_index]
        if parent.is_input or graph.only_consumer(parent) is not current:
            break
        layer = parent.operation
        if relu is None and _is_plain_relu(layer):
            relu = parent
        elif pad is None and type(layer) is keras.layers.ZeroPadding2D and (
            type(node.operation) is keras.layers.DepthwiseConv2D
            and layer.data_format == "channels_last"
        ):
            pad = parent
        else:
            break
        current = parent
    return relu, pad


def plan(model, fuse_relu_conv=True, inplace_norm=True, lean_dilated=True, recompute=None):
    """Finds what `rewrite` would change, without building anything."""
    graph = _Graph(model)
    result = Plan(recomputed=[segment.name for segment in recompute or ()])
    for node in graph.nodes:
        layer = node.operation
        if inplace_norm and type(layer) in _NORM_TWINS and layer.name not in result.replacements:
            result.inplace.append(layer.name)  # once, also for a layer called twice
            result.replacements[layer.name] = (_NORM_TWINS[type(layer)], {})
        conv_types = (keras.layers.DepthwiseConv2D, keras.layers.Conv2D)
        if type(layer) not in conv_types or len(layer._inbound_nodes) != 1:
            continue
        if layer.data_format != "channels_last" or getattr(layer, "groups", 1) != 1:
            continue
        relu, pad = _relu_chain(graph, node) if fuse_relu_conv else (None, None)
        if relu is not None:
            result.fused.append((relu.operation.name, layer.name))
            result.skipped.add(id(relu))
            extra = {}
            if type(layer) is keras.layers.DepthwiseConv2D:
                cls = ReluDepthwiseConv2D
                if pad is not None:
                    result.skipped.add(id(pad))
                    extra["input_padding"] = pad.operation.padding
            else:
                cls = ReluConv2D
            result.replacements[layer.name] = (cls, extra)
        elif (
            lean_dilated
            and type(layer) is keras.layers.DepthwiseConv2D
            and tuple(layer.dilation_rate) != (1, 1)
        ):
            result.lean.append(layer.name)
            result.replacements[layer.name] = (LeanDepthwiseConv2D, {})
    return result


def _segment_nodes(graph, segment):
    start = graph.model.get_layer(segment.start).output
    end = graph.model.get_layer(segment.end)
    # Walk back from the end to the start tensor.
    inside, stack = set(), [end._inbound_nodes[0]]
    while stack:
        node = stack.pop()
        if id(node) in inside:
            continue
        inside.add(id(node))
        for tensor in node.input_tensors:
            if tensor is start:
                continue
            parent = tensor._keras_history.operation._inbound_nodes[tensor._keras_history.node_index]
            if parent.is_input:
                raise ValueError(f"recompute segment {segment.name!r}: {segment.start!r} does not cut it off")
            stack.append(parent)
    for node in graph.nodes:
        if id(node) in inside and node.operation is not end:
            for tensor in node.outputs:
                used = graph.consumers[id(tensor)]
                if id(tensor) in graph.outputs or any(id(user) not in inside for user in used):
                    raise ValueError(
                        f"recompute segment {segment.name!r}: {node.operation.name!r} is used outside it"
                    )
    return inside, start, end._inbound_nodes[0]


def rewrite(model, fuse_relu_conv=True, inplace_norm=True, lean_dilated=True, recompute=None):
    """Returns a new functional model with the memory-saving twins and the same weights.

    Args:
      model: a functional `keras.Model`.
      fuse_relu_conv: replace ReLU [-> ZeroPadding2D] -> DepthwiseConv2D (either
        order) by `ReluDepthwiseConv2D`, and ReLU -> Conv2D by `ReluConv2D`, where
        each output feeds only the next layer. ReLU6 and leaky ReLU are left alone
        (their masks are not ReLU's).
      inplace_norm: replace every stock `BatchNormalization` and
        `GroupNormalization` by its output-only twin.
      lean_dilated: replace the other dilated `DepthwiseConv2D`s by
        `LeanDepthwiseConv2D`, which does not keep a space-to-batch copy.
      recompute: a sequence of `Segment`s to wrap in `Recompute`.

    Everything else is rebuilt from its config unchanged. What was rewritten is
    logged on the "tfseg.memory" logger; `plan()` returns it without building.
    """
    graph = _Graph(model)
    summary = plan(model, fuse_relu_conv, inplace_norm, lean_dilated, recompute)
    segments = [(s, *_segment_nodes(graph, s)) for s in recompute or ()]
    for i, (a, inside_a, _, _) in enumerate(segments):
        for b, inside_b, _, _ in segments[i + 1 :]:
            if inside_a & inside_b:
                raise ValueError(f"recompute segments {a.name!r} and {b.name!r} overlap")
    in_segment = set().union(*(inside for _, inside, _, _ in segments)) if segments else set()
    segment_at_end = {id(end): (s, inside, start) for s, inside, start, end in segments}
    new_layers = {}
    nested = [n.operation.name for n in graph.nodes if isinstance(n.operation, keras.Model)]
    if nested:
        log.warning("%s: nested models are copied as they are, not rewritten: %s", model.name, nested)

    def twin(layer):
        if layer not in new_layers:
            cls, extra = summary.replacements.get(layer.name, (type(layer), {}))
            new_layers[layer] = cls.from_config({**layer.get_config(), **extra})
        return new_layers[layer]

    def run(nodes, tensors, outer=True):
        for node in nodes:
            if outer and id(node) in segment_at_end:
                segment, inside, start = segment_at_end[id(node)]
                block_input = keras.Input(batch_shape=start.shape, dtype=start.dtype)
                block_nodes = [n for n in graph.nodes if id(n) in inside]
                block_out = run(block_nodes, {id(start): block_input}, outer=False)[id(node.outputs[0])]
                block = keras.Model(block_input, block_out, name=f"{segment.name}_block")
                tensors[id(node.outputs[0])] = Recompute(block, name=segment.name)(tensors[id(start)])
                continue
            if outer and id(node) in in_segment:
                continue  # built inside its Recompute block
            if id(node) in summary.skipped:
                tensors[id(node.outputs[0])] = tensors[id(node.input_tensors[0])]
                continue
            args, kwargs = node.arguments.fill_in(tensors)
            outputs = twin(node.operation)(*args, **kwargs)
            for old, new in zip(node.outputs, keras.tree.flatten(outputs)):
                tensors[id(old)] = new
        return tensors

    inputs = [keras.Input(batch_shape=t.shape, dtype=t.dtype, name=t.name) for t in model.inputs]
    tensors = run(graph.nodes, {id(old): new for old, new in zip(model.inputs, inputs)})
    outputs = keras.tree.map_structure(lambda t: tensors[id(t)], model._outputs_struct)
    new_model = keras.Model(inputs, outputs, name=model.name)
    for old, new in new_layers.items():
        new.set_weights(old.get_weights())
    log.info("rewrote %s: %s", model.name, summary)
    return new_model
