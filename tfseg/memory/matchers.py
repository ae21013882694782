"""The graph patterns the memory rewrite looks for in a functional Keras model
(`tfseg.memory.graph.Graph`): activations before convs, separable convs, shared ReLUs,
residual adds."""

import keras

from tfseg import keras_graph
from tfseg.layers import elementwise
from tfseg.layers.recompute import is_linear_conv
from tfseg.memory.segments import producer
from tfseg.memory.twins import CHANNEL_NORMS, fusable_conv, tuned

# Elementwise and deterministic, so a separable block can run them again.
_ACTIVATIONS = (keras.layers.ReLU, keras.layers.Activation)


def _recorded(op):
    """The operation class `op` (a `keras.ops` function) records in a functional graph:
    `x + y` in a traced block's call (`tfseg.memory.traced`) is that op, not a layer."""
    x = keras.KerasTensor((1, 1))
    return type(keras_graph.producer(op(x, x)))


# A two-input sum or product, as a layer or as the op a traced call records.
ADDS = (keras.layers.Add, _recorded(keras.ops.add))
MULTIPLIES = (keras.layers.Multiply, _recorded(keras.ops.multiply))


def _compute_dtype(node):
    return getattr(node.operation, "compute_dtype", None) or node.outputs[0].dtype


def activation_chain(graph, node):
    """The elementwise activation [and ZeroPadding2D] nodes, in either order, that
    feed only `node` (a conv), or (None, None)."""
    act = pad = None
    parent = graph.sole_feeder(node)
    while parent is not None:
        layer = parent.operation
        if act is None and elementwise.is_elementwise(layer):
            act = parent
        elif (pad is None and type(layer) is keras.layers.ZeroPadding2D
              and layer.data_format == "channels_last"):
            pad = parent
        else:
            break
        parent = graph.sole_feeder(parent)
    if act is not None and graph.shared(act.operation):
        return None, None  # a shared activation layer would still run elsewhere
    return (act, pad) if act is not None else (None, None)


def shared_relus(graph, taken, fuse_relu_depthwise, fuse_relu_conv, fold_adds):
    """{ReLU node: ({conv node: twin}, [Add nodes])} for each plain ReLU used by
    several nodes, each of them a conv that can take the ReLU in (its twin), a plain
    ReLU (a ReLU of a ReLU is that ReLU: it can read the ReLU's input as it is) or an
    Add whose other input is a norm that will fold it in (with `fold_adds`; see
    `residual_folds`): that norm adds relu(input) itself, without keeping it.

    Such a ReLU's output is no longer made: its users read its input, which its
    norm keeps anyway, instead of keeping a second tensor of that size (Xception's
    `entry_conv2_relu`, read by `entry_block1`'s shortcut and first separable conv:
    128 MiB at 1024x2048; ResNet's block outputs, read by the next block's first
    conv and its add)."""
    shared = {}
    foldable = _foldable(graph, taken) if fold_adds else (lambda node, tensor: False)
    for node in graph.nodes:
        users = graph.consumers[id(node.outputs[0])] if len(node.outputs) == 1 else []
        if (len(users) < 2 or id(node) in taken or not elementwise.is_plain_relu(node.operation)
                or id(node.outputs[0]) in graph.outputs
                or graph.shared(node.operation)):
            continue
        twins, adds = {}, []
        for user in users:
            twin = fusable_conv(graph, user.operation, fuse_relu_depthwise, fuse_relu_conv)
            if twin is not None and id(user) not in taken:
                twins[user] = twin
            elif id(user) not in taken and foldable(user, node.outputs[0]):
                adds.append(user)
            elif not elementwise.is_plain_relu(user.operation):
                break
        else:
            shared[node] = (twins, adds)
    return shared


def norm_folds(graph, taken, node, tensor, other):
    """Whether `node` (an Add) can fold in the norm that makes `tensor`, its input
    beside `other`: the norm feeds only it, once, at `other`'s shape, and the Add
    computes in the norm's dtype (the folded sum is made in it)."""
    norm = producer(tensor)
    return (not norm.is_input and id(norm) not in taken
            and not graph.shared(norm.operation) and graph.only_consumer(norm) is node
            and other is not tensor and tuple(other.shape) == tuple(tensor.shape)
            and _compute_dtype(node) == norm.operation.compute_dtype)


def _foldable(graph, taken):
    """Whether an Add node's input other than `tensor` is a stock norm's output that
    `_residual_folds` will fold the Add into (with output-only norms on)."""
    def foldable(node, tensor):
        if type(node.operation) not in ADDS or len(node.input_tensors) != 2:
            return False
        (other,) = [t for t in node.input_tensors if t is not tensor] or [None]
        return (other is not None and type(producer(other).operation) in CHANNEL_NORMS
                and norm_folds(graph, taken, node, other, tensor))
    return foldable


def separable_chain(graph, conv):
    """[activation/ZeroPadding2D ->] DepthwiseConv2D -> norm [-> activation] -> `conv`:
    the nodes before `conv`, each used once, or None."""
    if not is_linear_conv(conv.operation):
        return None
    chain, node = [], graph.sole_feeder(conv)
    if node is not None and type(node.operation) in _ACTIVATIONS:
        chain, node = [node], graph.sole_feeder(node)
    for kind in (CHANNEL_NORMS, (keras.layers.DepthwiseConv2D,)):
        if node is None or type(node.operation) not in kind:
            return None
        chain, node = [node, *chain], graph.sole_feeder(node)
    while node is not None and type(node.operation) in (*_ACTIVATIONS, keras.layers.ZeroPadding2D):
        chain, node = [node, *chain], graph.sole_feeder(node)
    if any(graph.shared(n.operation) for n in chain):
        return None  # a shared layer would run in two places
    if tuned(conv.operation) or any(tuned(n.operation) for n in chain):
        return None
    return chain


def relu_start(graph, start, inside):
    """The plain ReLU node that makes a segment's input `start` when the segment (node
    ids `inside`) is its only reader, else None. The segment then starts before it:
    the block keeps the ReLU's input (a norm's output, which that norm keeps anyway)
    instead of a second tensor of that size, and runs the ReLU again."""
    node = producer(start)
    if (node.is_input or not elementwise.is_plain_relu(node.operation) or id(node) in inside
            or id(start) in graph.outputs or graph.shared(node.operation)):
        return None
    return node if all(id(user) in inside for user in graph.consumers[id(start)]) else None


def residual_folds(graph, taken, norms):
    """{id(Add node): (norm node, other input)} for each two-input `Add` fed by one of
    `norms` (layer names) that feeds only it, at the other input's shape. The folded
    norm keeps the sum (which the next layer keeps anyway) instead of its own output:
    a residual connection then keeps two tensors, not three."""
    folds = {}
    for node in graph.nodes:
        if (type(node.operation) not in ADDS or len(node.input_tensors) != 2
                or id(node) in taken):
            continue
        for i, tensor in enumerate(node.input_tensors):
            norm, other = producer(tensor), node.input_tensors[1 - i]
            if (not norm.is_input and norm.operation.name in norms
                    and norm_folds(graph, taken, node, tensor, other)):
                folds[id(node)] = (norm, other)
                break
    return folds


def scaled_input(graph, conv):
    """(Multiply node, full input, scale) when `conv` (a Conv2D node) reads only a
    two-input `Multiply` of a [N, H, W, C] tensor by a [N, 1, 1, C] one
    (squeeze-and-excitation's channel weights) that feeds nothing else, else None."""
    node = graph.sole_feeder(conv)
    if (node is None or type(node.operation) not in MULTIPLIES
            or len(node.input_tensors) != 2 or graph.shared(node.operation)):
        return None
    for full, scale in (node.input_tensors, node.input_tensors[::-1]):
        if (len(full.shape) == 4 and tuple(scale.shape) == (full.shape[0], 1, 1, full.shape[3])
                and full.shape[1] != 1 and full is not scale):
            return node, full, scale
    return None


def plain_conv(graph, node):
    """`keras.layers.Conv2D` or `keras.layers.DepthwiseConv2D` where `node`'s layer is
    exactly one, called once in `graph`, channels-last, ungrouped and not `tuned`, else
    None: the convs a twin can replace."""
    layer = node.operation
    kind = type(layer)
    if (kind not in (keras.layers.DepthwiseConv2D, keras.layers.Conv2D) or graph.shared(layer)
            or tuned(layer)):
        return None
    if layer.data_format != "channels_last" or getattr(layer, "groups", 1) != 1:
        return None
    return kind


def depthwise_conv2d(graph, node):
    """Whether `node`'s layer is exactly a `keras.layers.Conv2D` with one group per input
    channel and one filter per group (a depthwise conv written as a grouped conv, as
    keras-hub's MobileNetV3 writes it), called once, channels last, not `tuned`."""
    layer = node.operation
    return (type(layer) is keras.layers.Conv2D and not graph.shared(layer) and not tuned(layer)
            and layer.data_format == "channels_last" and layer.groups > 1
            and layer.groups == layer.filters == node.input_tensors[0].shape[-1])
