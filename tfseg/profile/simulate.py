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


class _Replay:
    """One step of `sg` replayed on `allocator` with `workers` threads; its buffers'
    allocator keys are tagged `tag`, apart from the previous step's."""

    def __init__(self, sg, allocator, workers, tag):
        self.sg, self.allocator, self.workers, self.tag = sg, allocator, workers, tag
        self.deps = list(sg.deps)
        self.remaining = dict(sg.readers)
        self.physical = {}  # buffer -> allocator key (a forwarded buffer keeps its input's)
        self.start_bytes = allocator.current()
        allocator.reset_peak()
        self.peak, self.peak_op, self.live_at_peak = 0, None, {}
        self.live_bytes, self.live_peak = 0, 0
        self.inline = [collections.deque() for _ in range(workers)]
        self.queue = [collections.deque() for _ in range(workers)]
        self.busy = [False] * workers
        self.events, self.sequence, self.now = [], 0, 0.0

    def start(self, worker, i):
        """Starts op `i` on `worker`: allocates (or forwards) its outputs, notes the peak."""
        sg, physical = self.sg, self.physical
        dying = [b for b in sg.reads[i]
                 if self.remaining[b] == 1 and b not in sg.pinned and b in physical]
        for b in sg.allocates[i]:
            source = None
            if sg.forwards[i]:
                same = (d for d in dying if sg.size[d] == sg.size[b] and sg.dtype[d] == sg.dtype[b])
                source = next(same, None)
            if source is not None:
                dying.remove(source)
                physical[b] = physical.pop(source)
                self.remaining[source] = 0
                self.live_bytes -= sg.size[source]
            else:
                physical[b] = (self.tag, b)
                self.allocator.allocate(physical[b], sg.size[b])
            self.live_bytes += sg.size[b]
        if self.live_bytes > self.live_peak:
            self.live_peak = self.live_bytes
        total = self.allocator.peak_total() - self.start_bytes
        if total > self.peak:
            self.peak, self.peak_op = total, sg.ops[i].name
            self.live_at_peak = {b: sg.size[b] for b in physical}
        self.busy[worker] = True
        self.sequence += 1
        heapq.heappush(self.events, (self.now + sg.seconds[i], self.sequence, worker, i))

    def free(self, b):
        """Returns buffer `b` to the allocator unless it is pinned or already gone."""
        if b in self.physical and b not in self.sg.pinned:
            self.allocator.release(self.physical.pop(b))
            self.live_bytes -= self.sg.size[b]

    def next_op(self, worker):
        """The op `worker` runs next: its inline ops, then its pool queue, then a steal."""
        if self.inline[worker]:
            return self.inline[worker].popleft()
        if self.queue[worker]:
            return self.queue[worker].popleft()  # the pool: own queue newest first
        for other in range(self.workers):
            if self.queue[other]:
                return self.queue[other].pop()  # steal the oldest
        return None

    def release_buffers(self, i):
        """Frees the inputs op `i` read last and its outputs that nothing reads."""
        sg, remaining = self.sg, self.remaining
        for b in sg.reads[i]:  # inputs are released once the op is done
            if remaining.get(b, 0) > 0:
                remaining[b] -= 1
                if remaining[b] == 0:
                    self.free(b)
        for b in sg.allocates[i]:
            if not sg.readers[b]:
                self.free(b)

    def schedule_users(self, worker, i):
        """Queues op `i`'s users that became ready, as TF's executor hands them out."""
        inline, queue = self.inline[worker], self.queue[worker]
        expensive = None
        for user in self.sg.users[i]:
            self.deps[user] -= 1
            if self.deps[user]:
                continue
            if self.sg.cheap[user]:
                inline.append(user)
            else:
                if expensive is not None:
                    queue.appendleft(expensive)
                expensive = user
        if expensive is not None:
            if inline:
                queue.appendleft(expensive)
            else:
                inline.append(expensive)

    def run(self):
        """Runs the step to its end and returns its `Simulation`."""
        workers = self.workers
        for k, i in enumerate(i for i in range(len(self.sg.ops)) if self.deps[i] == 0):
            self.queue[k % workers].append(i)
        for worker in range(workers):
            i = self.next_op(worker)
            if i is not None:
                self.start(worker, i)
        while self.events:
            self.now, _, worker, i = heapq.heappop(self.events)
            self.busy[worker] = False
            self.release_buffers(i)
            self.schedule_users(worker, i)
            for w in [worker] + [w for w in range(workers) if w != worker]:
                if not self.busy[w]:
                    j = self.next_op(w)
                    if j is not None:
                        self.start(w, j)
        for b in list(self.physical):
            self.free(b)
        return Simulation(int(self.peak), int(self.live_peak), self.peak_op or "",
                          self.live_at_peak)


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
    _Replay(sg, allocator, workers, tag=0).run()
    return _Replay(sg, allocator, workers, tag=1).run()
