"""The peak of a training step, estimated by replaying its traced graph, op by op,
on a model of TF's executor and allocator (neither runs it).

The backward pass's own working set comes on top of the tensors the forward pass
keeps (norm-gradient temporaries, gradients that wait where branches join, a
`Recompute` block's activations while it runs again, the padded space-to-batch
copies of dilated depthwise convs, backward branches that run concurrently), so
the whole step is replayed as TF's executor runs it:

- every op output is a buffer, allocated when its op starts and freed when the
  last op that reads it (through buffer-forwarding ops) has finished; element-wise
  ops reuse a dying input of their size, as TF's kernels do;
- ops run on as many inter-op threads as the process has, scheduled like
  `tensorflow/core/common_runtime/executor.cc` (a finished op runs its last ready
  expensive successor itself and hands the others to the thread pool, whose
  workers take their own newest task first and steal the oldest from others);
  an op takes time in proportion to the bytes it touches and its conv FLOPs;
- buffers come from `tfseg.profile.allocator.BFCModel`. Like the measurement, it
  runs one warm-up step, then reports the next step's peak over its start.

On this project's 2-core CPU machines it lands from 15% under to 20% over the allocator's
peak on every variant (tests/report). The peak of a real step itself varies from
run to run by as much where concurrent branches race (the ASPP backward at small
crops): the estimate is of a typical schedule, not a bound.
"""

import collections
import dataclasses
import heapq
import os

import tensorflow as tf

from tfseg.profile.allocator import BFCModel
from tfseg.profile.step_graph import StepGraph


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
    """Replays one step of `sg` on `allocator` with `workers` threads; its buffers'
    allocator keys are tagged `tag`, apart from the previous step's."""
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
    sg = StepGraph(graph)
    allocator = BFCModel()
    for k, size in enumerate(state):
        allocator.allocate(("state", k), size)
    workers = workers or inter_op_threads()
    _run(sg, allocator, workers, tag=0)
    return _run(sg, allocator, workers, tag=1)
