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


def _kinds(graph, sim, kept, model):
    """{buffer alive at the simulated peak: its kind}: "kept_for_backward" (a kept
    tensor), "gradients" (a backward-pass buffer of a trainable weight's shape: a
    weight's gradient, waiting for the update) or "other"."""
    kept_names = {k.tensor for k in kept}
    forward = forward_ops(graph.outputs[0])
    shapes = {tuple(w.shape) for w in model.trainable_weights}
    kinds = {}
    for buffer in sim.live_at_peak:
        if buffer in kept_names:
            kinds[buffer] = "kept_for_backward"
            continue
        tensor = graph.get_tensor_by_name(buffer)
        backward = tensor.op.name not in forward
        kinds[buffer] = "gradients" if backward and tuple(tensor.shape) in shapes else "other"
    return kinds


def peak_by_kind(graph, sim, kept, model):
    """The buffers alive at the simulated peak, by kind: "kept_for_backward" (the kept
    tensors still alive), "gradients" (backward-pass buffers of a trainable weight's
    shape: the weights' gradients, waiting for the update), "other" (the backward
    pass's temporaries, and forward tensors not yet freed) and "allocator" (its
    rounding and reuse). They sum to the estimated peak over the step's start."""
    kinds = collections.Counter({"kept_for_backward": 0, "gradients": 0, "other": 0})
    for buffer, kind in _kinds(graph, sim, kept, model).items():
        kinds[kind] += sim.live_at_peak[buffer]
    kinds["allocator"] = max(0, sim.peak_bytes - sum(sim.live_at_peak.values()))
    return dict(kinds)


def held_at_peak(graph, sim, kept, model, part, state_bytes):
    """What the process holds at the simulated peak, by holder, in the model's order:
    "weights" and "optimizer_slots" (`state_bytes`: {"weights": ..., "optimizer_slots":
    ..., "other_state": ...}, held before the step), "gradients" (those computed by the
    peak), then every part (`part(layer name)`) with the other buffers its layers made
    (the step's other state, its counter and random states, under "loss_and_other") and
    "allocator" (its rounding and reuse). They sum to the state plus the estimated
    peak over the step's start."""
    names = layer_names(model)
    held = collections.Counter({"weights": state_bytes["weights"],
                                "optimizer_slots": state_bytes["optimizer_slots"],
                                "gradients": 0})
    for buffer, kind in _kinds(graph, sim, kept, model).items():
        holder = "gradients" if kind == "gradients" else part(layer_of(buffer, names))
        held[holder] += sim.live_at_peak[buffer]
    held["loss_and_other"] += state_bytes["other_state"]
    held["allocator"] = max(0, sim.peak_bytes - sum(sim.live_at_peak.values()))
    return dict(held)


def _holders(variable):
    """The `tf.Variable`s that hold `variable`'s memory: a Keras variable's own, or
    a distributed variable's per-replica copies."""
    inner = variable.value if isinstance(variable, keras.Variable) else variable
    return tuple(getattr(inner, "values", (inner,)))


def _state(graph, model, optimizer=None):
    """(sizes, optimizer bytes, other bytes): the buffers that exist before a step of
    `graph`, and how many bytes of them are the optimizer's, and the step's own.

    The model's weights, then every other variable the step reads: the optimizer's
    state as it was built (SGD's momentum slots, none without momentum; its
    iteration count and learning rate) and any counter the step keeps. Read from
    the traced step, not assumed from the optimizer's kind.

    Args:
      graph: the `tf.Graph` of the traced training step.
      model: the model it trains.
      optimizer: the step's optimizer, whose variables (and a wrapped optimizer's) are
        told apart from the step's own; None: every other variable counts as the
        optimizer's.
    """
    own = {id(h) for w in model.weights for h in _holders(w)}
    size = lambda v: v.shape.num_elements() * v.dtype.size  # noqa: E731
    others = sorted((v for v in graph.variables if id(v) not in own), key=lambda v: v.name)
    # Laid out for the simulated allocator as a process creates them: the weights,
    # then the optimizer's state (built for the trainable weights) and the counter.
    trainable = [size(v) for w in model.trainable_weights for v in _holders(w)]
    frozen = [size(v) for w in model.non_trainable_weights for v in _holders(w)]
    extra = [size(v) for v in others]
    if optimizer is None:
        return trainable + frozen + extra, sum(extra), 0
    wrapped = getattr(optimizer, "inner_optimizer", optimizer)
    slots = {id(h) for o in {id(optimizer): optimizer, id(wrapped): wrapped}.values()
             for v in o.variables for h in _holders(v)}
    mine = sum(size(v) for v in others if id(v) in slots)
    return trainable + frozen + extra, mine, sum(extra) - mine


def _peak_by_batch(step_fn, args, extra_batches, state, workers, peak_bytes):
    """{batch size: estimated peak}: `peak_bytes` at `args`' batch, and the step
    traced (not run) and simulated at each of `extra_batches`."""
    batch = int(tf.nest.flatten(args)[0].shape[0])
    by_batch = {batch: peak_bytes}
    for extra in extra_batches:
        if extra not in by_batch:
            specs = tf.nest.map_structure(
                lambda a: tf.TensorSpec((extra,) + tuple(a.shape[1:]), a.dtype), args)
            traced = step_fn.get_concrete_function(*specs).graph
            by_batch[extra] = simulate(traced, state, workers).peak_bytes
    return by_batch


def _kept_accounting(graph, kept, names, part, segment_of):
    """What the `kept` tensors come to (in all, by part, the largest) and, with
    `segment_of`, what recomputing them would cost: `segment_costs` as "segments" and
    the `op_seconds` of every op of the step that runs as "estimated_step_seconds"."""
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
    }


def _at_peak(graph, sim, kept, model, names, part, state_bytes):
    """The simulated peak, and what is alive at it by part, by kind and by holder
    (`held_at_peak`'s `state_bytes`), as `step_breakdown` returns them; `names`: the
    model's `layer_names`."""
    at_peak = collections.Counter()
    for buffer, size in sim.live_at_peak.items():
        at_peak[part(layer_of(buffer, names))] += size
    at_peak["allocator"] = max(0, sim.peak_bytes - sum(sim.live_at_peak.values()))
    return {
        "estimated_peak_bytes": sim.peak_bytes,
        "live_peak_bytes": sim.live_peak_bytes,
        "peak_op": sim.peak_op,
        "peak_by_part": dict(at_peak.most_common()),
        "peak_by_kind": peak_by_kind(graph, sim, kept, model),
        "held_at_peak": held_at_peak(graph, sim, kept, model, part, state_bytes),
    }


def step_breakdown(step_fn, args, model, part_of, extra_batches=(), workers=None,
                   segment_of=None, optimizer=None, rollup=None):
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
      optimizer: the step's optimizer: its variables are "optimizer_slots" in
        "held_at_peak", the step's other state (its counter) is "loss_and_other".
      rollup: {subtotal: parts} the report sums, e.g. {"backbone": ("entry_flow",
        "middle_flow", "exit_flow")}, returned as "rollup" (None: {}).

    Returns a dict: the kept tensors by part, the parameter and gradient bytes,
    `optimizer_state_bytes` (the variables the step reads besides the model's:
    the optimizer's slots and scalars, and the step's counter),
    `estimated_peak_bytes` (`simulate`'s allocator peak over the step's start),
    `live_peak_bytes`, `peak_op`, `peak_by_part` (the buffers alive at the peak,
    by part, plus "allocator" for its rounding), `peak_by_kind` (the same buffers by
    kind: `peak_by_kind`), `held_at_peak` (the weights, optimizer slots and
    gradients beside the parts: `held_at_peak`), `rollup` and
    `estimated_peak_by_batch`.

    Example, on a step of `tfseg.training.step.make_train_step` (tests/report/test_rollup.py)::

        result = step_breakdown(step, (batch,), model, part_of, optimizer=optimizer,
                                rollup={"backbone": ("entry_flow", "middle_flow",
                                                     "exit_flow")})
        result["held_at_peak"]["weights"]  # sum(v.numpy().nbytes for v in model.weights)
    """
    graph = step_fn.get_concrete_function(*args).graph
    names = layer_names(model)
    part = lambda layer: part_of(layer) or "loss_and_other"  # noqa: E731
    kept = kept_tensors(graph, graph.outputs[0], names)
    state, optimizer_bytes, other_bytes = _state(graph, model, optimizer)
    sim = simulate(graph, state, workers)
    parameters = sum(v.numpy().nbytes for v in model.weights)
    by_batch = _peak_by_batch(step_fn, args, extra_batches, state, workers, sim.peak_bytes)
    return {
        **_kept_accounting(graph, kept, names, part, segment_of),
        "parameter_bytes": parameters,
        "gradient_bytes": sum(v.numpy().nbytes for v in model.trainable_weights),
        "optimizer_state_bytes": optimizer_bytes + other_bytes,
        **_at_peak(graph, sim, kept, model, names, part, {"weights": parameters,
                   "optimizer_slots": optimizer_bytes, "other_state": other_bytes}),
        "rollup": {name: list(parts) for name, parts in (rollup or {}).items()},
        "estimated_peak_by_batch": by_batch,
        "simulated_threads": workers or inter_op_threads(),
    }
