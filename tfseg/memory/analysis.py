"""Which forward tensors does the backward pass keep? A static look at the traced step.

Forward ops are the data ancestors of the loss. A forward tensor is *kept* when an
op that is not a forward op (the backward pass, the update) reads it. Ops that only
forward a buffer (Identity, IdentityN, StopGradient, Reshape) are resolved to the
tensor that owns the memory, so a buffer shared by two backward passes counts once.
The sum is a lower bound on the peak: the backward pass's own working set
(norm-gradient temporaries, gradients accumulated where branches join) comes on top.
"""

import collections
import dataclasses

import tensorflow as tf

_ALIASING_OPS = {"Identity", "IdentityN", "StopGradient", "Reshape", "Squeeze", "ExpandDims"}


@dataclasses.dataclass(frozen=True)
class KeptTensor:
    """A forward buffer the backward pass reads: its size, the op that made it, and
    the model layer whose name scope that op is in ("" when none is)."""

    bytes: int
    op: str
    layer: str


def _owner(tensor):
    """The tensor that owns `tensor`'s buffer, through buffer-forwarding ops."""
    while tensor.op.type in _ALIASING_OPS:
        index = tensor.value_index if tensor.op.type == "IdentityN" else 0
        tensor = tensor.op.inputs[index]
    return tensor


def _layer_of(op_name, layer_names):
    # tf.function scopes each layer call as ".../<layer name>[_<k>]/...": match a
    # scope component against the model's own layer names, innermost first.
    for part in reversed(op_name.split("/")):
        if part in layer_names:
            return part
        base, _, suffix = part.rpartition("_")
        if suffix.isdigit() and base in layer_names:
            return base
    return ""


def _live_ops(graph):
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


def kept_tensors(step_graph, loss, layer_names):
    """Lists the forward buffers that the backward pass and update read.

    Args:
      step_graph: the `tf.Graph` of a traced training step.
      loss: the loss tensor in that graph (before any control-dependency Identity).
      layer_names: names of the model's layers, to attribute each buffer.
    """
    loss = _owner(loss)
    forward, stack = set(), [loss.op]
    while stack:
        op = stack.pop()
        if op.name not in forward:
            forward.add(op.name)
            stack.extend(t.op for t in op.inputs)
    live = _live_ops(step_graph)
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
                owner = _owner(tensor)
                if owner.op.type in ("ReadVariableOp", "Const", "Placeholder"):
                    continue
                size = owner.shape.num_elements() * owner.dtype.size
                kept[owner.name] = KeptTensor(size, owner.op.name, _layer_of(owner.op.name, layer_names))
    return sorted(kept.values(), key=lambda k: -k.bytes)


def summarize(kept, key):
    """Total bytes per `key(kept_tensor)`, largest first."""
    totals = collections.Counter()
    for item in kept:
        totals[key(item)] += item.bytes
    return dict(totals.most_common())
