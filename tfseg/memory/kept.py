"""What a training step keeps for its backward pass, read from its traced graph (never run).

Forward ops are the data ancestors of the loss. A forward tensor is *kept* when an op
that is not a forward op (the backward pass, the update) reads it. Ops that only
forward a buffer (Identity, IdentityN, StopGradient, Reshape) are resolved to the
tensor that owns the memory, so a buffer shared by two backward passes counts once.
Each is attributed to the model layer whose name scope made it: what the memory
report (`tfseg.profile.analysis`) and the split's cuts (`tfseg.split.cuts`) count.
"""

import dataclasses

import keras
import tensorflow as tf

from tfseg import keras_graph

# Ops whose output is their input's buffer.
ALIASING_OPS = {"Identity", "IdentityN", "StopGradient", "Reshape", "Squeeze", "ExpandDims",
                "Snapshot", "PreventGradient", "EnsureShape"}


def owner(tensor):
    """The tensor that owns `tensor`'s buffer, through buffer-forwarding ops."""
    while tensor.op.type in ALIASING_OPS:
        index = tensor.value_index if tensor.op.type == "IdentityN" else 0
        tensor = tensor.op.inputs[index]
    return tensor


def nbytes(tensor):
    """The bytes of `tensor`'s buffer; 0 for handles and tensors of unknown shape."""
    if tensor.dtype in (tf.resource, tf.variant) or not tensor.shape.is_fully_defined():
        return 0
    return tensor.shape.num_elements() * tensor.dtype.size


def live_ops(graph):
    """Ops that run: ancestors of the graph's outputs and of stateful ops. The
    function runtime prunes the rest (e.g. Identity ops left on unused results)."""
    roots = [t.op for t in graph.outputs] + [op for op in graph.get_operations() if op._is_stateful]
    live, stack = set(), roots
    while stack:
        op = stack.pop()
        if op.name not in live:
            live.add(op.name)
            stack.extend(t.op for t in op.inputs)
            stack.extend(op.control_inputs)
    return live


@dataclasses.dataclass(frozen=True)
class KeptTensor:
    """A forward buffer the backward pass reads: its size, the op that made it, the
    model layer whose name scope that op is in ("" when none is), and its tensor's name."""

    bytes: int
    op: str
    layer: str
    tensor: str = ""


def layer_of(op_name, layer_names):
    """The model layer whose name scope `op_name` is in, "" when none is."""
    # tf.function scopes each layer call as ".../<layer name>[_<k>]/...": match a
    # scope component against the model's own layer names, innermost first.
    for part in reversed(op_name.split("/")):
        if part in layer_names:
            return part
        base, _, suffix = part.rpartition("_")
        if suffix.isdigit() and base in layer_names:
            return base
    return ""


def forward_ops(loss):
    """The names of the ops the loss depends on: the forward pass."""
    forward, stack = set(), [owner(loss).op]
    while stack:
        op = stack.pop()
        if op.name not in forward:
            forward.add(op.name)
            stack.extend(t.op for t in op.inputs)
    return forward


def kept_tensors(step_graph, loss, layer_names):
    """Lists the forward buffers that the backward pass and update read.

    Args:
      step_graph: the `tf.Graph` of a traced training step.
      loss: the loss tensor in that graph (before any control-dependency Identity).
      layer_names: names of the model's layers, to attribute each buffer.
    """
    forward = forward_ops(loss)
    live = live_ops(step_graph)
    kept = {}
    for op in step_graph.get_operations():
        if op.name not in forward:
            continue
        for tensor in op.outputs:
            if tensor.dtype in (tf.resource, tf.variant) or not tensor.shape.is_fully_defined():
                continue
            if op.type == "ReadVariableOp" or op.type == "Const":
                continue  # weights: model state, not activations
            if any(u.name in live and u.name not in forward for u in tensor.consumers()):
                home = owner(tensor)
                if home.op.type in ("ReadVariableOp", "Const", "Placeholder"):
                    continue
                kept[home.name] = KeptTensor(nbytes(home), home.op.name,
                                             layer_of(home.op.name, layer_names), home.name)
    return sorted(kept.values(), key=lambda k: -k.bytes)


def layer_names(model):
    """The names of `model`'s layers, those nested in blocks included."""
    return {inner.name for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)
            for inner in keras_graph.sublayers(layer, include_self=True)}


def step_kept_bytes(model, inputs):
    """The bytes of the forward buffers a traced (never run) training step of `model` on
    `inputs` keeps for its backward pass, the loss the sum of its outputs' squares: the
    measure `tfseg.memory.paying` weighs each trick by.

    Example:

    >>> model = keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3))
    >>> step_kept_bytes(model, tf.zeros((2, 32, 32, 3))) > 0
    True
    """
    @tf.function
    def step(inputs):
        with tf.GradientTape() as tape:
            outputs = tf.nest.flatten(model(inputs, training=True))
            loss = tf.add_n([tf.reduce_sum(_wide(o) ** 2) for o in outputs])
        return loss, tape.gradient(loss, model.trainable_variables)

    graph = step.get_concrete_function(inputs).graph
    return sum(k.bytes for k in kept_tensors(graph, graph.outputs[0], layer_names(model)))


def _wide(tensor):
    """`tensor` in float32 where it is narrower (a mixed-precision model's output)."""
    if tensor.dtype.is_floating and tensor.dtype.size >= 4:
        return tensor
    return tf.cast(tensor, tf.float32)
