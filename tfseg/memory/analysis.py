"""Where does a training step's memory go? A static look at the traced step.

Two analyses of the step's `tf.Graph`, neither of which runs it:

*Kept tensors* (`kept_tensors`): forward ops are the data ancestors of the loss. A
forward tensor is *kept* when an op that is not a forward op (the backward pass,
the update) reads it. Ops that only forward a buffer (Identity, IdentityN,
StopGradient, Reshape) are resolved to the tensor that owns the memory, so a
buffer shared by two backward passes counts once. Their sum is what the
backward pass reads, attributed to layers and parts: a lower bound on the peak.

*The peak* (`simulate`): the backward pass's own working set comes on top of
the kept tensors (norm-gradient temporaries, gradients that wait where branches
join, a `Recompute` block's activations while it runs again, the padded
space-to-batch copies of dilated depthwise convs, backward branches that run
concurrently). So the estimate replays the whole step, op by op, as TF's
executor runs it:

- every op output is a buffer, allocated when its op starts and freed when the
  last op that reads it (through buffer-forwarding ops) has finished; element-wise
  ops reuse a dying input of their size, as TF's kernels do;
- ops run on as many inter-op threads as the process has, scheduled like
  `tensorflow/core/common_runtime/executor.cc` (a finished op runs its last ready
  expensive successor itself and hands the others to the thread pool, whose
  workers take their own newest task first and steal the oldest from others);
  an op takes time in proportion to the bytes it touches and its conv FLOPs;
- buffers come from a model of TF's BFC allocator (best fit; a free chunk is
  split only when it is at least twice the request, so a reused chunk can count
  up to twice its request; regions that double as they grow; allocations under
  4 KiB go to oneDNN's small-size allocator, whose peak adds to BFC's). Like the
  measurement, it runs one warm-up step, then reports the next step's peak over
  its start.

On this project's 2-core CPU machines it lands within ~15% of the allocator's
peak on every variant (tests/report). The peak of a real step itself varies from
run to run by as much where concurrent branches race (the ASPP backward at small
crops): the estimate is of a typical schedule, not a bound.
"""

import bisect
import collections
import dataclasses
import heapq
import os

import keras
import tensorflow as tf

_ALIASING_OPS = {"Identity", "IdentityN", "StopGradient", "Reshape", "Squeeze", "ExpandDims",
                 "Snapshot", "PreventGradient", "EnsureShape"}
# Outputs that are not new buffers of the step: weights, constants, arguments.
_NOT_ALLOCATED = {"Const", "ReadVariableOp", "Placeholder", "VarHandleOp", "_Arg"}
# Kernels that TF's executor runs inline ("inexpensive").
_CHEAP = _ALIASING_OPS | {"Const", "Shape", "ShapeN", "Size", "Rank", "NoOp", "Placeholder",
                          "ReadVariableOp"}
# Kernels that write into a dying input of their size (forward_input_or_allocate_output).
_FORWARDING = {"Relu", "ReluGrad", "Relu6", "Relu6Grad", "LeakyRelu", "LeakyReluGrad", "Mul", "Sub",
               "AddV2", "Add", "AddN", "RealDiv", "DivNoNan", "Neg", "Maximum", "Minimum",
               "SquaredDifference", "Square", "Sqrt", "Rsqrt", "RsqrtGrad", "Reciprocal", "BiasAdd",
               "Exp", "Log", "Tanh", "TanhGrad", "Sigmoid", "SigmoidGrad", "Softplus", "Abs",
               "Pow", "FloorDiv", "FloorMod", "Select", "SelectV2",
               # the loss gradient is written over the logits
               "SparseSoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogits"}
_CONVS = {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "DepthwiseConv2dNative",
          "DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter"}
_SMALL_ALLOCATION = 4096  # oneDNN's CPU allocator sends smaller requests to malloc


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


def _nbytes(tensor):
    if tensor.dtype in (tf.resource, tf.variant) or not tensor.shape.is_fully_defined():
        return 0
    return tensor.shape.num_elements() * tensor.dtype.size


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
                kept[owner.name] = KeptTensor(_nbytes(owner), owner.op.name,
                                              _layer_of(owner.op.name, layer_names))
    return sorted(kept.values(), key=lambda k: -k.bytes)


def summarize(kept, key):
    """Total bytes per `key(kept_tensor)`, largest first."""
    totals = collections.Counter()
    for item in kept:
        totals[key(item)] += item.bytes
    return dict(totals.most_common())


# --- the peak: the step replayed on a model of TF's executor and allocator ---------


class _BFCModel:
    """The statistics of TF's BFC allocator behind oneDNN's CPU allocator."""

    def __init__(self, small=_SMALL_ALLOCATION):
        self.small = small
        self.chunks = {}  # start -> [size, in use, region]
        self.starts = []  # sorted chunk starts
        self.free = []  # sorted (size, start) of free chunks
        self.next_address = 0
        self.region = 2 << 20
        self.in_use = self.peak = 0
        self.small_in_use = self.small_peak = 0
        self.where = {}

    def allocate(self, key, nbytes):
        if nbytes < self.small:
            self.where[key] = (None, nbytes)
            self.small_in_use += nbytes
            self.small_peak = max(self.small_peak, self.small_in_use)
            return
        rounded = max(256, -(-nbytes // 256) * 256)
        i = bisect.bisect_left(self.free, (rounded, -1))
        if i == len(self.free):
            self._extend(rounded)
            i = bisect.bisect_left(self.free, (rounded, -1))
        size, start = self.free.pop(i)
        chunk = self.chunks[start]
        if size >= 2 * rounded or size - rounded >= 128 << 20:
            chunk[0] = rounded
            self._add(start + rounded, size - rounded, chunk[2])
            size = rounded
        chunk[1] = True
        self.where[key] = (start, size)
        self.in_use += size
        self.peak = max(self.peak, self.in_use)

    def _add(self, start, size, region):
        self.chunks[start] = [size, False, region]
        bisect.insort(self.starts, start)
        bisect.insort(self.free, (size, start))

    def _extend(self, rounded):
        grew = False
        while rounded > self.region:
            self.region *= 2
            grew = True
        start = self.next_address
        self.next_address += self.region
        self._add(start, self.region, start)
        if not grew:
            self.region *= 2

    def release(self, key):
        start, size = self.where.pop(key)
        if start is None:
            self.small_in_use -= size
            return
        self.in_use -= size
        chunk = self.chunks[start]
        chunk[1] = False
        after = start + chunk[0]
        if after in self.chunks and not self.chunks[after][1] and self.chunks[after][2] == chunk[2]:
            self.free.remove((self.chunks[after][0], after))
            chunk[0] += self.chunks.pop(after)[0]
            self.starts.remove(after)
        i = bisect.bisect_left(self.starts, start)
        if i > 0:
            before = self.starts[i - 1]
            previous = self.chunks[before]
            if not previous[1] and previous[2] == chunk[2] and before + previous[0] == start:
                self.free.remove((previous[0], before))
                previous[0] += chunk[0]
                del self.chunks[start]
                self.starts.pop(i)
                start, chunk = before, previous
        bisect.insort(self.free, (chunk[0], start))

    def reset_peak(self):
        self.peak, self.small_peak = self.in_use, self.small_in_use

    def current(self):
        return self.in_use + self.small_in_use

    def peak_total(self):
        # oneDNN's allocator reports the sum of its two allocators' peaks.
        return self.peak + self.small_peak


class _StepGraph:
    """The live ops of a traced step, their dependencies, and the buffers each
    allocates and reads."""

    def __init__(self, graph):
        live = _live_ops(graph)
        self.ops = [op for op in graph.get_operations() if op.name in live]
        index = {op.name: i for i, op in enumerate(self.ops)}
        self.deps = []
        self.users = [[] for _ in self.ops]
        for i, op in enumerate(self.ops):
            parents = {index[t.op.name] for t in op.inputs}
            parents |= {index[c.name] for c in op.control_inputs}
            self.deps.append(len(parents))
            for p in parents:
                self.users[p].append(i)
        for users in self.users:
            users.sort()
        self.size, self.dtype, buffer_of = {}, {}, {}
        self.allocates = [[] for _ in self.ops]
        for i, op in enumerate(self.ops):
            for t in op.outputs:
                owner = _owner(t)
                if owner.op.type in _NOT_ALLOCATED or owner.op.name not in live:
                    continue
                if not _nbytes(owner):
                    continue
                buffer_of[t.name] = owner.name
                if owner is t:
                    self.size[t.name], self.dtype[t.name] = _nbytes(t), t.dtype
                    self.allocates[i].append(t.name)
        self.reads = []
        self.readers = collections.Counter()
        for op in self.ops:
            read = (buffer_of[t.name] for t in op.inputs if t.name in buffer_of)
            buffers = list(dict.fromkeys(read))
            self.reads.append(buffers)
            self.readers.update(buffers)
        self.pinned = {buffer_of.get(t.name) for t in graph.outputs}
        self.cheap = [op.type in _CHEAP for op in self.ops]
        self.forwards = [op.type in _FORWARDING for op in self.ops]
        self.seconds = [0.0 if cheap else _op_seconds(op)
                        for cheap, op in zip(self.cheap, self.ops)]


def _op_seconds(op):
    """A rough duration: only the order in which concurrent ops finish matters."""
    moved = sum(_nbytes(t) for t in list(op.inputs) + list(op.outputs))
    flops = 0
    if op.type in _CONVS:
        kernel = op.outputs[0] if op.type.endswith("Filter") else op.inputs[1]
        large = op.inputs[2] if "Backprop" in op.type else op.outputs[0]
        if kernel.shape.rank == 4 and kernel.shape.is_fully_defined() and large.shape.is_fully_defined():
            kh, kw, cin, _ = kernel.shape.as_list()
            depth = 1 if "Depthwise" in op.type else cin
            flops = 2 * large.shape.num_elements() * kh * kw * depth
    return 2e-6 + moved / 4e9 + flops / 30e9


@dataclasses.dataclass(frozen=True)
class Simulation:
    """The simulated step: `peak_bytes` over its start (allocator chunks, as the
    allocator counts them), `live_peak_bytes` (the most bytes of buffers alive at
    once, without the allocator's rounding), the op running at the peak and the
    buffers alive then ({owning tensor name: bytes})."""

    peak_bytes: int
    live_peak_bytes: int
    peak_op: str
    live_at_peak: dict


def _run(sg, allocator, workers, tag):
    deps = list(sg.deps)
    remaining = dict(sg.readers)
    physical = {}  # buffer -> allocator key (a forwarded buffer keeps its input's)
    start_bytes = allocator.current()
    allocator.reset_peak()
    peak, peak_op, live_bytes, live_peak, live_at_peak = 0, None, 0, 0, {}
    inline = [collections.deque() for _ in range(workers)]
    queue = [collections.deque() for _ in range(workers)]
    busy = [False] * workers
    events, sequence, now = [], 0, 0.0

    def start(worker, i):
        nonlocal sequence, peak, peak_op, live_bytes, live_peak, live_at_peak
        dying = [b for b in sg.reads[i]
                 if remaining[b] == 1 and b not in sg.pinned and b in physical]
        for b in sg.allocates[i]:
            source = None
            if sg.forwards[i]:
                same = (d for d in dying if sg.size[d] == sg.size[b] and sg.dtype[d] == sg.dtype[b])
                source = next(same, None)
            if source is not None:
                dying.remove(source)
                physical[b] = physical.pop(source)
                remaining[source] = 0
                live_bytes -= sg.size[source]
            else:
                physical[b] = (tag, b)
                allocator.allocate(physical[b], sg.size[b])
            live_bytes += sg.size[b]
        if live_bytes > live_peak:
            live_peak = live_bytes
        total = allocator.peak_total() - start_bytes
        if total > peak:
            peak, peak_op = total, sg.ops[i].name
            live_at_peak = {b: sg.size[b] for b in physical}
        busy[worker] = True
        sequence += 1
        heapq.heappush(events, (now + sg.seconds[i], sequence, worker, i))

    def free(b):
        nonlocal live_bytes
        if b in physical and b not in sg.pinned:
            allocator.release(physical.pop(b))
            live_bytes -= sg.size[b]

    def next_op(worker):
        if inline[worker]:
            return inline[worker].popleft()
        if queue[worker]:
            return queue[worker].popleft()  # the pool: own queue newest first
        for other in range(workers):
            if queue[other]:
                return queue[other].pop()  # steal the oldest
        return None

    for k, i in enumerate(i for i in range(len(sg.ops)) if deps[i] == 0):
        queue[k % workers].append(i)
    for worker in range(workers):
        i = next_op(worker)
        if i is not None:
            start(worker, i)
    while events:
        now, _, worker, i = heapq.heappop(events)
        busy[worker] = False
        for b in sg.reads[i]:  # inputs are released once the op is done
            if remaining.get(b, 0) > 0:
                remaining[b] -= 1
                if remaining[b] == 0:
                    free(b)
        for b in sg.allocates[i]:
            if not sg.readers[b]:
                free(b)
        expensive = None
        for user in sg.users[i]:
            deps[user] -= 1
            if deps[user]:
                continue
            if sg.cheap[user]:
                inline[worker].append(user)
            else:
                if expensive is not None:
                    queue[worker].appendleft(expensive)
                expensive = user
        if expensive is not None:
            if inline[worker]:
                queue[worker].appendleft(expensive)
            else:
                inline[worker].append(expensive)
        for w in [worker] + [w for w in range(workers) if w != worker]:
            if not busy[w]:
                j = next_op(w)
                if j is not None:
                    start(w, j)
    for b in list(physical):
        free(b)
    return Simulation(int(peak), int(live_peak), peak_op or "", live_at_peak)


def inter_op_threads():
    """The inter-op threads TF runs a step on: its setting, else one per usable core."""
    threads = tf.config.threading.get_inter_op_parallelism_threads()
    if threads:
        return threads
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def simulate(graph, state=(), workers=None):
    """Replays the traced step `graph` twice (warm-up, then measured) on a model of
    TF's executor and BFC allocator; returns the second step's `Simulation`.

    `state`: sizes of the buffers that exist before the first step (weights,
    optimizer slots), allocated first as in the real process.
    """
    sg = _StepGraph(graph)
    allocator = _BFCModel()
    for k, nbytes in enumerate(state):
        allocator.allocate(("state", k), nbytes)
    workers = workers or inter_op_threads()
    _run(sg, allocator, workers, tag=0)
    return _run(sg, allocator, workers, tag=1)


def _outer_layers(model):
    outer = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    index = {}
    for i, layer in enumerate(outer):
        for inner in layer._flatten_layers():
            index.setdefault(inner.name, i)
    return outer, index


def _state_sizes(model, optimizer_slots=1):
    trainable = [v.numpy().nbytes for v in model.trainable_weights]
    others = [v.numpy().nbytes for v in model.non_trainable_weights]
    return trainable * (1 + optimizer_slots) + others


def step_breakdown(step_fn, args, model, part_of, extra_batches=(), workers=None):
    """Static accounting of a traced training step, and a static peak estimate.

    Args:
      step_fn: the `tf.function` training step, `step_fn(images, labels)`
        (already traced for `args`).
      args: its arguments; the first dimension of each is the batch.
      model: the model it trains (momentum SGD: one slot per trainable weight).
      part_of: layer name -> part name (e.g. "entry_flow"), "" for unknown.
      extra_batches: more batch sizes to estimate the peak at: the step is traced
        for them (not run), e.g. for the slope of memory over the batch.
      workers: inter-op threads to simulate (default: this process's).

    Returns a dict: the kept tensors by part, the parameter and gradient bytes,
    `estimated_peak_bytes` (`simulate`'s allocator peak over the step's start),
    `live_peak_bytes`, `peak_op`, `peak_by_part` (the buffers alive at the peak,
    by part, plus "allocator" for its rounding) and `estimated_peak_by_batch`.
    """
    graph = step_fn.get_concrete_function(*args).graph
    outer, index = _outer_layers(model)
    names = set(index)
    part = lambda layer: part_of(layer) or "loss_and_other"  # noqa: E731
    kept = kept_tensors(graph, graph.outputs[0], names)
    state = _state_sizes(model)
    sim = simulate(graph, state, workers)
    at_peak = collections.Counter()
    for buffer, nbytes in sim.live_at_peak.items():
        at_peak[part(_layer_of(buffer, names))] += nbytes
    at_peak["allocator"] = max(0, sim.peak_bytes - sum(sim.live_at_peak.values()))
    batch = int(args[0].shape[0])
    by_batch = {batch: sim.peak_bytes}
    for extra in extra_batches:
        if extra not in by_batch:
            specs = [tf.TensorSpec((extra,) + tuple(a.shape[1:]), a.dtype) for a in args]
            traced = step_fn.get_concrete_function(*specs).graph
            by_batch[extra] = simulate(traced, state, workers).peak_bytes
    return {
        "kept_bytes": sum(k.bytes for k in kept),
        "kept_by_part": summarize(kept, lambda k: part(k.layer)),
        "largest_kept_bytes": max((k.bytes for k in kept), default=0),
        "parameter_bytes": sum(v.numpy().nbytes for v in model.weights),
        "gradient_bytes": sum(v.numpy().nbytes for v in model.trainable_weights),
        "estimated_peak_bytes": sim.peak_bytes,
        "live_peak_bytes": sim.live_peak_bytes,
        "peak_op": sim.peak_op,
        "peak_by_part": dict(at_peak.most_common()),
        "estimated_peak_by_batch": by_batch,
        "simulated_threads": workers or inter_op_threads(),
    }
