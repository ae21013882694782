"""Where does a training step's memory go? A static look at the traced step.

Two analyses of the step's `tf.Graph`, neither of which runs it:

*Kept tensors* (`tfseg.memory.kept.kept_tensors`): the forward buffers that the
backward pass and update read, attributed to layers and parts: a lower bound on
the peak.

*The peak* (`tfseg.profile.simulate`): the step replayed op by op on a model of
TF's executor and BFC allocator (`tfseg.profile.allocator`), which adds the
backward pass's own working set to the kept tensors.

`step_breakdown` runs both for a model's training step.
"""

import collections

import keras
import tensorflow as tf

from tfseg.memory.kept import forward_ops, kept_tensors, layer_names, layer_of
from tfseg.profile.simulate import inter_op_threads, simulate
from tfseg.profile.step_graph import live_ops, op_seconds


def segment_costs(step_graph, loss, kept, layer_names, segment_of):
    """What recomputing each segment would save and cost, for the budget planner:
    {segment: {"kept_bytes", "forward_seconds"}}: the bytes of the buffers its
    layers keep for the backward pass (`kept`, from `kept_tensors`) and the
    estimated seconds of its forward ops (`op_seconds`), which a recompute runs
    again. `segment_of(layer name)` is the segment, "" for none."""
    costs = collections.defaultdict(lambda: {"kept_bytes": 0, "forward_seconds": 0.0})
    for item in kept:
        if segment_of(item.layer):
            costs[segment_of(item.layer)]["kept_bytes"] += item.bytes
    forward = forward_ops(loss)
    for op in step_graph.get_operations():
        segment = segment_of(layer_of(op.name, layer_names)) if op.name in forward else ""
        if segment:
            costs[segment]["forward_seconds"] += op_seconds(op)
    return dict(costs)


def summarize(kept, key):
    """Total bytes per `key(kept_tensor)`, largest first."""
    totals = collections.Counter()
    for item in kept:
        totals[key(item)] += item.bytes
    return dict(totals.most_common())


def peak_by_kind(graph, sim, kept, model):
    """The buffers alive at the simulated peak, by kind: "kept_for_backward" (the kept
    tensors still alive), "gradients" (backward-pass buffers of a trainable weight's
    shape: the weights' gradients, waiting for the update), "other" (the backward
    pass's temporaries, and forward tensors not yet freed) and "allocator" (its
    rounding and reuse). They sum to the estimated peak over the step's start."""
    kept_names = {k.tensor for k in kept}
    forward = forward_ops(graph.outputs[0])
    shapes = {tuple(w.shape) for w in model.trainable_weights}
    kinds = collections.Counter({"kept_for_backward": 0, "gradients": 0, "other": 0})
    for buffer, size in sim.live_at_peak.items():
        if buffer in kept_names:
            kinds["kept_for_backward"] += size
            continue
        tensor = graph.get_tensor_by_name(buffer)
        backward = tensor.op.name not in forward
        kinds["gradients" if backward and tuple(tensor.shape) in shapes else "other"] += size
    kinds["allocator"] = max(0, sim.peak_bytes - sum(sim.live_at_peak.values()))
    return dict(kinds)


def _holders(variable):
    """The `tf.Variable`s that hold `variable`'s memory: a Keras variable's own, or
    a distributed variable's per-replica copies."""
    inner = variable.value if isinstance(variable, keras.Variable) else variable
    return tuple(getattr(inner, "values", (inner,)))


def _state(graph, model):
    """(sizes, optimizer bytes): the buffers that exist before a step of `graph`.

    The model's weights, then every other variable the step reads: the optimizer's
    state as it was built (SGD's momentum slots, none without momentum; its
    iteration count and learning rate) and any counter the step keeps. Read from
    the traced step, not assumed from the optimizer's kind.

    Args:
      graph: the `tf.Graph` of the traced training step.
      model: the model it trains.
    """
    own = {id(h) for w in model.weights for h in _holders(w)}
    size = lambda v: v.shape.num_elements() * v.dtype.size  # noqa: E731
    others = sorted((v for v in graph.variables if id(v) not in own), key=lambda v: v.name)
    # Laid out for the simulated allocator as a process creates them: the weights,
    # then the optimizer's state (built for the trainable weights) and the counter.
    trainable = [size(v) for w in model.trainable_weights for v in _holders(w)]
    frozen = [size(v) for w in model.non_trainable_weights for v in _holders(w)]
    extra = [size(v) for v in others]
    return trainable + frozen + extra, sum(extra)


def step_breakdown(step_fn, args, model, part_of, extra_batches=(), workers=None,
                   segment_of=None):
    """Static accounting of a traced training step, and a static peak estimate.

    Args:
      step_fn: the `tf.function` training step, `step_fn(*args)` (already
        traced for `args`), e.g. `tfseg.training.step.make_train_step`'s, whose
        first output is the loss.
      args: its arguments, tensors or nests of them (`((images, labels),)`);
        the first dimension of each tensor is the batch.
      model: the model it trains. The optimizer's state is read from the traced
        step: the variables it reads besides the model's weights.
      part_of: layer name -> part name (e.g. "entry_flow"), "" for unknown.
      extra_batches: more batch sizes to estimate the peak at: the step is traced
        for them (not run), e.g. for the slope of memory over the batch.
      workers: inter-op threads to simulate (default: this process's).
      segment_of: layer name -> recompute segment ("" for none): adds
        `segment_costs` as "segments" and the whole step's estimated seconds
        (`op_seconds` of every op that runs) as "estimated_step_seconds".

    Returns a dict: the kept tensors by part, the parameter and gradient bytes,
    `optimizer_state_bytes` (the variables the step reads besides the model's:
    the optimizer's slots and scalars, and the step's counter),
    `estimated_peak_bytes` (`simulate`'s allocator peak over the step's start),
    `live_peak_bytes`, `peak_op`, `peak_by_part` (the buffers alive at the peak,
    by part, plus "allocator" for its rounding), `peak_by_kind` (the same buffers by
    kind: `peak_by_kind`) and `estimated_peak_by_batch`.
    """
    graph = step_fn.get_concrete_function(*args).graph
    names = layer_names(model)
    part = lambda layer: part_of(layer) or "loss_and_other"  # noqa: E731
    kept = kept_tensors(graph, graph.outputs[0], names)
    state, optimizer_bytes = _state(graph, model)
    sim = simulate(graph, state, workers)
    at_peak = collections.Counter()
    for buffer, size in sim.live_at_peak.items():
        at_peak[part(layer_of(buffer, names))] += size
    at_peak["allocator"] = max(0, sim.peak_bytes - sum(sim.live_at_peak.values()))
    batch = int(tf.nest.flatten(args)[0].shape[0])
    by_batch = {batch: sim.peak_bytes}
    for extra in extra_batches:
        if extra not in by_batch:
            specs = tf.nest.map_structure(
                lambda a: tf.TensorSpec((extra,) + tuple(a.shape[1:]), a.dtype), args)
            traced = step_fn.get_concrete_function(*specs).graph
            by_batch[extra] = simulate(traced, state, workers).peak_bytes
    costs = {}
    if segment_of is not None:
        live = live_ops(graph)
        costs = {"segments": segment_costs(graph, graph.outputs[0], kept, names, segment_of),
                 "estimated_step_seconds": sum(op_seconds(op) for op in graph.get_operations()
                                               if op.name in live)}
    return {
        **costs,
        "kept_bytes": sum(k.bytes for k in kept),
        "kept_by_part": summarize(kept, lambda k: part(k.layer)),
        "largest_kept_bytes": max((k.bytes for k in kept), default=0),
        "parameter_bytes": sum(v.numpy().nbytes for v in model.weights),
        "gradient_bytes": sum(v.numpy().nbytes for v in model.trainable_weights),
        "optimizer_state_bytes": optimizer_bytes,
        "estimated_peak_bytes": sim.peak_bytes,
        "live_peak_bytes": sim.live_peak_bytes,
        "peak_op": sim.peak_op,
        "peak_by_part": dict(at_peak.most_common()),
        "peak_by_kind": peak_by_kind(graph, sim, kept, model),
        "estimated_peak_by_batch": by_batch,
        "simulated_threads": workers or inter_op_threads(),
    }
