"""Where a functional Keras model can use the memory-saving twins: the graph patterns."""

import collections
import dataclasses

import keras

from tfseg.layers import (
    InplaceBatchNormalization,
    InplaceGroupNormalization,
    LeanDepthwiseConv2D,
    ReluConv2D,
    ReluDepthwiseConv2D,
)
from tfseg.layers.recompute import is_linear_conv
from tfseg.memory.segments import branch_nodes, producer, segment_nodes

# Exact stock classes only: a subclass may change the maths.
NORM_TWINS = {
    keras.layers.BatchNormalization: InplaceBatchNormalization,
    keras.layers.GroupNormalization: InplaceGroupNormalization,
}
# Elementwise and deterministic, so a separable block can run them again.
_ACTIVATIONS = (keras.layers.ReLU, keras.layers.Activation)


@dataclasses.dataclass
class Plan:
    """What `rewrite` changes, by layer name."""

    separable: list = dataclasses.field(default_factory=list)  # (depthwise, pointwise) pairs
    fused: list = dataclasses.field(default_factory=list)  # (relu, conv) pairs
    lean: list = dataclasses.field(default_factory=list)  # dilated depthwise convs
    inplace: list = dataclasses.field(default_factory=list)  # norm layers
    recomputed: list = dataclasses.field(default_factory=list)  # segment names
    residual: list = dataclasses.field(default_factory=list)  # (norm, Add) pairs folded
    serial: dict = dataclasses.field(default_factory=dict, repr=False)  # name -> branch node ids
    replacements: dict = dataclasses.field(default_factory=dict, repr=False)
    skipped: set = dataclasses.field(default_factory=set, repr=False)  # ReLU/pad nodes
    # id(node) -> (segment name, nodes inside, block input tensor, tail conv or None)
    blocks: dict = dataclasses.field(default_factory=dict, repr=False)
    # segment name -> its fused separable convs, as `blocks`: built inside its block
    inner: dict = dataclasses.field(default_factory=dict, repr=False)
    # id(Add node) -> (norm node, the other input): the norm adds it and the Add goes
    folds: dict = dataclasses.field(default_factory=dict, repr=False)

    def __str__(self):
        return (
            f"fused {len(self.separable)} separable convs and {len(self.fused)} ReLU+conv pairs, "
            f"made {len(self.lean)} dilated depthwise convs lean and {len(self.inplace)} norms "
            f"output-only ({len(self.residual)} with their residual add), recomputing "
            f"{len(self.recomputed)} blocks"
        )


def _is_plain_relu(layer):
    if type(layer) is keras.layers.ReLU:
        cfg = layer.get_config()
        return cfg["max_value"] is None and not cfg["negative_slope"] and not cfg["threshold"]
    # ReLU6 and leaky ReLU are not ReLU: their masks differ, so they stay.
    return type(layer) is keras.layers.Activation and layer.activation is keras.activations.relu


class Graph:
    """The nodes of a functional model in topological order, and who uses what."""

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

    def sole_feeder(self, node):
        """The node that makes `node`'s single input and feeds nothing else, else None."""
        if len(node.input_tensors) != 1:
            return None
        parent = producer(node.input_tensors[0])
        if parent.is_input or self.only_consumer(parent) is not node:
            return None
        return parent


def _relu_chain(graph, node):
    """The ReLU [and ZeroPadding2D] nodes, in either order, that feed only `node`."""
    relu = pad = None
    parent = graph.sole_feeder(node)
    while parent is not None:
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
        parent = graph.sole_feeder(parent)
    return relu, pad


def _fusable_conv(layer, fuse_relu_depthwise, fuse_relu_conv):
    """The twin that can take a ReLU into `layer`, a conv, or None."""
    if type(layer) not in (keras.layers.DepthwiseConv2D, keras.layers.Conv2D):
        return None
    if len(layer._inbound_nodes) != 1 or layer.data_format != "channels_last":
        return None
    if type(layer) is keras.layers.DepthwiseConv2D:
        return ReluDepthwiseConv2D if fuse_relu_depthwise else None
    return ReluConv2D if fuse_relu_conv and getattr(layer, "groups", 1) == 1 else None


def _shared_relus(graph, taken, fuse_relu_depthwise, fuse_relu_conv):
    """{ReLU node: {conv name: twin}} for each plain ReLU used by several nodes, each of
    them a conv that can take the ReLU in (its twin) or a plain ReLU (a ReLU of a
    ReLU is that ReLU: it can read the ReLU's input as it is).

    Such a ReLU's output is no longer made: its users read its input, which its
    norm keeps anyway, instead of keeping a second tensor of that size (Xception's
    `entry_conv2_relu`, read by `entry_block1`'s shortcut and first separable conv:
    128 MiB at 1024x2048)."""
    shared = {}
    for node in graph.nodes:
        users = graph.consumers[id(node.outputs[0])] if len(node.outputs) == 1 else []
        if (len(users) < 2 or id(node) in taken or not _is_plain_relu(node.operation)
                or id(node.outputs[0]) in graph.outputs):
            continue
        twins = {}
        for user in users:
            twin = _fusable_conv(user.operation, fuse_relu_depthwise, fuse_relu_conv)
            if twin is not None and id(user) not in taken:
                twins[user.operation.name] = twin
            elif not _is_plain_relu(user.operation):
                break
        else:
            shared[node] = twins
    return shared


def _separable_chain(graph, conv):
    """[activation/ZeroPadding2D ->] DepthwiseConv2D -> norm [-> activation] -> `conv`:
    the nodes before `conv`, each used once, or None."""
    if not is_linear_conv(conv.operation):
        return None
    chain, node = [], graph.sole_feeder(conv)
    if node is not None and type(node.operation) in _ACTIVATIONS:
        chain, node = [node], graph.sole_feeder(node)
    for kind in (tuple(NORM_TWINS), (keras.layers.DepthwiseConv2D,)):
        if node is None or type(node.operation) not in kind:
            return None
        chain, node = [node, *chain], graph.sole_feeder(node)
    while node is not None and type(node.operation) in (*_ACTIVATIONS, keras.layers.ZeroPadding2D):
        chain, node = [node, *chain], graph.sole_feeder(node)
    if any(len(n.operation._inbound_nodes) != 1 for n in chain):
        return None  # a shared layer would run in two places
    return chain


def _relu_start(graph, start, inside):
    """The plain ReLU node that makes a segment's input `start` when the segment (node
    ids `inside`) is its only reader, else None. The segment then starts before it:
    the block keeps the ReLU's input (a norm's output, which that norm keeps anyway)
    instead of a second tensor of that size, and runs the ReLU again."""
    node = producer(start)
    if (node.is_input or not _is_plain_relu(node.operation) or id(node) in inside
            or id(start) in graph.outputs or len(node.operation._inbound_nodes) != 1):
        return None
    return node if all(id(user) in inside for user in graph.consumers[id(start)]) else None


def _residual_folds(graph, taken, norms):
    """{id(Add node): (norm node, other input)} for each two-input `Add` fed by one of
    `norms` (layer names) that feeds only it, at the other input's shape. The folded
    norm keeps the sum (which the next layer keeps anyway) instead of its own output:
    a residual connection then keeps two tensors, not three."""
    folds = {}
    for node in graph.nodes:
        if (type(node.operation) is not keras.layers.Add or len(node.input_tensors) != 2
                or id(node) in taken):
            continue
        for i, tensor in enumerate(node.input_tensors):
            norm, other = producer(tensor), node.input_tensors[1 - i]
            if (not norm.is_input and id(norm) not in taken and norm.operation.name in norms
                    and len(norm.operation._inbound_nodes) == 1
                    and graph.only_consumer(norm) is node and other is not tensor
                    and tuple(other.shape) == tuple(tensor.shape)):
                folds[id(node)] = (norm, other)
                break
    return folds


def plan(model, fuse_separable=True, fuse_relu_depthwise=True, fuse_relu_conv=True,
         inplace_norm=True, lean_dilated=True, recompute=None, fold_residual=True):
    """Finds what `rewrite` would change, without building anything. See `rewrite`."""
    graph = Graph(model)
    result = Plan(recomputed=[segment.name for segment in recompute or ()])
    taken = set()  # nodes inside a recompute segment or a fused separable conv
    tails = set()  # the pointwise convs of fused separable convs: `Recompute` runs them
    segment_of = {}  # id(node) -> the recompute segment it is in
    for segment in recompute or ():
        inside, start, end = segment_nodes(graph, segment)
        relu = _relu_start(graph, start, inside | taken)
        if relu is not None:  # the block keeps the norm's output, kept anyway
            inside, start = inside | {id(relu)}, relu.input_tensors[0]
        if inside & taken:
            raise ValueError(f"recompute segment {segment.name!r} overlaps another")
        taken |= inside
        segment_of.update(dict.fromkeys(inside, segment.name))
        result.blocks[id(end)] = (segment.name, inside, start, None)
        if segment.branches:
            shared = set() if relu is None else {id(relu)}
            result.serial[segment.name] = branch_nodes(segment, inside, start, end, shared)
    fused = set()
    for node in graph.nodes if fuse_separable else ():
        chain = None if id(node) in fused else _separable_chain(graph, node)
        inside = {id(n) for n in chain or ()}
        owners = {segment_of.get(i) for i in inside | {id(node)}}
        # A separable conv inside a recompute segment fuses too (its block is built
        # inside the segment's): the segment's second run then keeps each one's
        # input only, not its depthwise output and its pointwise input as well.
        if not chain or inside & fused or len(owners) != 1:
            continue
        depthwise = next(n for n in chain if type(n.operation) is keras.layers.DepthwiseConv2D)
        result.separable.append((depthwise.operation.name, node.operation.name))
        fused |= inside | {id(node)}
        tails.add(id(node))
        owner = owners.pop()
        blocks = result.blocks if owner is None else result.inner.setdefault(owner, {})
        blocks[id(node)] = (f"{depthwise.operation.name}_recompute", inside,
                            chain[0].input_tensors[0], node)
    taken |= fused
    if fuse_relu_depthwise or fuse_relu_conv:
        for relu, twins in _shared_relus(graph, taken, fuse_relu_depthwise,
                                         fuse_relu_conv).items():
            result.skipped.add(id(relu))
            for name, cls in twins.items():
                result.fused.append((relu.operation.name, name))
                result.replacements[name] = (cls, {})
    for node in graph.nodes:
        layer = node.operation
        if id(node) in tails or layer.name in result.replacements:
            continue  # a separable conv's tail, or a shared ReLU's user
        if inplace_norm and type(layer) in NORM_TWINS and layer.name not in result.replacements:
            result.inplace.append(layer.name)  # once, also for a layer called twice
            result.replacements[layer.name] = (NORM_TWINS[type(layer)], {})
        conv_types = (keras.layers.DepthwiseConv2D, keras.layers.Conv2D)
        if type(layer) not in conv_types or len(layer._inbound_nodes) != 1:
            continue
        if layer.data_format != "channels_last" or getattr(layer, "groups", 1) != 1:
            continue
        is_depthwise = type(layer) is keras.layers.DepthwiseConv2D
        fuse = fuse_relu_depthwise if is_depthwise else fuse_relu_conv
        relu, pad = _relu_chain(graph, node) if fuse else (None, None)
        if relu is not None:
            result.fused.append((relu.operation.name, layer.name))
            result.skipped.add(id(relu))
            extra = {}
            if is_depthwise:
                cls = ReluDepthwiseConv2D
                if pad is not None:
                    result.skipped.add(id(pad))
                    extra["input_padding"] = pad.operation.padding
            else:
                cls = ReluConv2D
            result.replacements[layer.name] = (cls, extra)
        elif lean_dilated and is_depthwise and tuple(layer.dilation_rate) != (1, 1):
            result.lean.append(layer.name)
            result.replacements[layer.name] = (LeanDepthwiseConv2D, {})
    result.folds = _residual_folds(graph, taken, set(result.inplace)) if fold_residual else {}
    by_id = {id(node): node for node in graph.nodes}
    result.residual = [(norm.operation.name, by_id[add].operation.name)
                       for add, (norm, _) in result.folds.items()]
    return result
