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

import keras
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


def step_breakdown(step_fn, args, model, part_of):
    """Static accounting of a traced training step, and a static peak estimate.

    Args:
      step_fn: the `tf.function` training step (already traced for `args`).
      args: its arguments.
      model: the model it trains.
      part_of: layer name -> part name (e.g. "entry_flow"), "" for unknown.

    The estimate replays the backward pass layer by layer, last layer first: at
    layer i, the tensors kept by layers 0..i are still alive, the gradients of
    layers i..end have been made (Keras applies them all at the end), and layer i
    adds its transient: two buffers of its largest size (the norm gradient's
    x_hat and dy * x_hat), plus, for a `Recompute` block, the activations it keeps
    while it runs again.
    """
    graph = step_fn.get_concrete_function(*args).graph
    outer = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    index = {}
    for i, layer in enumerate(outer):
        for inner in layer._flatten_layers():
            index.setdefault(inner.name, i)
    kept = kept_tensors(graph, graph.outputs[0], set(index))
    n = len(outer)
    kept_at, largest_at, grads_at = [0] * (n + 1), [0] * (n + 1), [0] * (n + 1)
    for item in kept:
        i = index.get(item.layer, n)  # unattributed: the loss, freed first
        kept_at[i] += item.bytes
        largest_at[i] = max(largest_at[i], item.bytes)
    transient = [2 * b for b in largest_at]
    for i, layer in enumerate(outer):
        grads_at[i] = sum(v.numpy().nbytes for v in layer.trainable_weights)
        transient[i] += _recompute_bytes(layer)
    peak, live, grads = 0, sum(kept_at), 0
    for i in range(n, -1, -1):
        grads += grads_at[i]
        peak = max(peak, live + grads + transient[i])
        live -= kept_at[i]
    return {
        "kept_bytes": sum(k.bytes for k in kept),
        "kept_by_part": summarize(kept, lambda k: part_of(k.layer) or "loss_and_other"),
        "largest_kept_bytes": max((k.bytes for k in kept), default=0),
        "recompute_bytes": max((_recompute_bytes(layer) for layer in outer), default=0),
        "parameter_bytes": sum(v.numpy().nbytes for v in model.weights),
        "gradient_bytes": sum(grads_at),
        "estimated_peak_bytes": peak,
    }


_BLOCK_CACHE = {}


def _recompute_bytes(layer):
    """Bytes a `Recompute` block keeps while it runs again in the backward pass
    (its own kept tensors, traced on its input shape); 0 for other layers."""
    from tfseg.layers import Recompute

    if not isinstance(layer, Recompute) or layer.traced_input_shape is None:
        return 0
    shape = layer.traced_input_shape
    if None in shape:
        return 0
    key = (layer.block.count_params(), len(layer.block.layers), shape)
    if key not in _BLOCK_CACHE:  # the 16 middle units are alike: trace one
        _BLOCK_CACHE[key] = _block_kept(layer.block, shape)
    return _BLOCK_CACHE[key]


def _block_kept(block, shape):
    holder = {}

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(block(x, training=True))
        holder["loss"] = loss
        return tape.gradient(loss, [x] + block.trainable_variables)

    graph = step.get_concrete_function(tf.TensorSpec(shape, block.inputs[0].dtype)).graph
    names = {layer.name for layer in block._flatten_layers()}
    return sum(k.bytes for k in kept_tensors(graph, holder["loss"], names))
