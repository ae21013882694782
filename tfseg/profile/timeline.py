"""Where a step's time goes: one call under TensorFlow's profiler, summed by op type.

`profile(fn, logdir)` runs `fn()` once (it must end by reading a value, so that the
device has finished) between `tf.profiler.experimental.start` and `stop`, reads the
trace TensorFlow writes (an `XSpace`, `tensorflow.tsl.profiler.protobuf.xplane_pb2`)
and returns:

- `device`: on a GPU, the kernels' time by the TensorFlow op type that launched them
  (CUPTI's `tf_op` stat, "name:Type"; under XLA, by the HLO op's kind), their count,
  and `busy_seconds`, the union of the kernels' intervals on every stream:
  `busy_seconds / wall_seconds` is how busy the card was, with no sampling. None
  where there is no GPU plane (the CPU).
- `host`: the executor's op events by type (on a GPU, the time to launch each op's
  kernels; on the CPU, the op's own work), their count and summed seconds, each op's
  own time (a function call or a cond's branch without the ops run inside it). `ops`
  counts every op the executor ran, `async_ops` those of them that ran asynchronously
  (an XLA computation's launch is one), which `by_type` leaves out.
- `by_block`: the XLA ops' time by the `tfseg.xla.Blocks` block whose computation ran
  them (`by_block`), forward and backward apart: {} without `--jit_compile=blocks`.

Each `by_type` is [[type, seconds, count], ...], longest first, the first `top` of them
with the rest summed into one `(other)` entry. It answers what NVML's utilisation
cannot: whether a step waits on the host (kernels fill little of the wall time while
the host's op events fill most of it) or on a few slow kernels (one type holds much of
the busy time). A kernel TensorFlow launched outside an op (a copy, a cuDNN helper)
counts under `(kernel) NAME`.

Example:

    >>> import tensorflow as tf
    >>> from tfseg.profile.timeline import profile
    >>> x = tf.random.normal([1, 32, 32, 8])
    >>> f = tf.function(lambda: tf.reduce_sum(tf.nn.relu(x)))
    >>> _ = float(f())                      # trace and warm up outside the profile
    >>> summary = profile(lambda: float(f()), "/tmp/tfseg_timeline")
    >>> sorted(summary)
    ['by_block', 'device', 'host', 'wall_seconds']
"""

import glob
import os
import re
import time

PS = 1e-12
# The executor's event for an asynchronous op, an XLA launch among them: such ops have no
# "name:Type" event of their own on the CPU.
ASYNC_START = "ExecutorState::ProcessAsync::Start"
# The XLA module a block's function compiles to (`tfseg.xla.blocks` names it "block_NAME"):
# "a_forward_block_NAME_ID__.N", its backward "a_inference___backward_block_NAME_ID_ID__.N",
# or "a_inference_block_NAME_ID__.N" where no gradient was taken. TF appends the ids.
BLOCK_MODULE = re.compile(r"_(forward|backward|inference)_block_(.+?)(?:_\d+)+__(?:\.\d+)?$")


def profile(fn, logdir, top=15):
    """The summary (above) of one call of `fn` under the profiler, its trace in logdir."""
    import tensorflow as tf

    tf.profiler.experimental.start(logdir)
    try:
        start = time.perf_counter()
        fn()
        wall = time.perf_counter() - start
    finally:
        tf.profiler.experimental.stop()
    return {"wall_seconds": wall, **summarize(newest_space(logdir), top)}


def newest_space(logdir):
    """The XSpace of the newest trace written under logdir."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    paths = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
    if not paths:
        raise FileNotFoundError(f"no *.xplane.pb under {logdir}: the profiler wrote no trace")
    space = xplane_pb2.XSpace()
    with open(max(paths, key=os.path.getmtime), "rb") as f:
        space.ParseFromString(f.read())
    return space


def summarize(space, top=15):
    """{"device": ..., "host": ...} of an XSpace (see the module's docstring)."""
    gpus = [p for p in space.planes if p.name.startswith("/device:GPU:")]
    hosts = [p for p in space.planes if p.name.startswith("/host:CPU")]
    device = None
    if gpus:
        totals, intervals = {}, []
        for plane in gpus:
            ids = {m.name: i for i, m in plane.stat_metadata.items()
                   if m.name in ("tf_op", "hlo_op")}
            for line in plane.lines:
                if not line.name.startswith("Stream"):
                    continue
                for event in line.events:
                    begin = line.timestamp_ns * 1000 + event.offset_ps
                    intervals.append((begin, begin + event.duration_ps))
                    _add(totals, kernel_type(plane, event, ids), event.duration_ps)
        device = {"busy_seconds": union_ps(intervals) * PS, "kernels": len(intervals),
                  "by_type": ranked(totals, top)}
    totals, launches = {}, 0
    for plane in hosts:
        for line in plane.lines:
            ops = [(event.offset_ps, event.duration_ps, kind) for event in line.events
                   if (kind := op_type(plane.event_metadata[event.metadata_id]))]
            for kind, self_ps in self_times(ops):
                _add(totals, kind, self_ps)
            launches += sum(plane.event_metadata[event.metadata_id].name == ASYNC_START
                            for event in line.events)
    host = {"ops": sum(n for _, n in totals.values()) + launches, "async_ops": launches,
            "op_seconds": sum(ps for ps, _ in totals.values()) * PS,
            "by_type": ranked(totals, top)}
    return {"device": device, "host": host, "by_block": by_block(space)}


def block_of(module):
    """(block name, "forward" or "backward") of an XLA module's name, or None for a
    module that is no block's (the loss, the update, a whole compiled step).

    Example: ``block_of("a_inference___backward_block_exit_block2_13409_14880__.40")``
    is ``("exit_block2", "backward")``."""
    found = BLOCK_MODULE.search(module)
    if not found:
        return None
    return found.group(2), "backward" if found.group(1) == "backward" else "forward"


def by_block(space):
    """{block: {"forward": seconds, "backward": seconds}} of an XSpace: the summed time
    of the XLA ops (events with an `hlo_module` stat) each block's computations ran.

    On a GPU these are the kernels on the device planes (the host's would count the same
    work twice); on the CPU, XLA's ops on the host's threads, which may overlap, as the
    host's op time does. Blocks appear in the order they first ran. Example:
    ``by_block(newest_space(logdir))["decoder"]["backward"]``."""
    gpus = [p for p in space.planes if p.name.startswith("/device:GPU:")]
    planes = gpus or [p for p in space.planes if p.name.startswith("/host:CPU")]
    found = []  # (begin, block, pass, duration): sorted, so that blocks keep their order
    for plane in planes:
        ids = {i for i, m in plane.stat_metadata.items() if m.name == "hlo_module"}
        for line in plane.lines:
            for event in line.events:
                module = next((stat_text(plane, s) for s in event.stats
                               if s.metadata_id in ids), None)
                named = module and block_of(module)
                if named:
                    begin = line.timestamp_ns * 1000 + event.offset_ps
                    found.append((begin, *named, event.duration_ps))
    out = {}
    for _, block, kind, duration_ps in sorted(found):
        times = out.setdefault(block, {"forward": 0.0, "backward": 0.0})
        times[kind] += duration_ps * PS
    return out


def stat_text(plane, stat):
    """A stat's string: its own, or that of the stat metadata it refers to."""
    return stat.str_value or (plane.stat_metadata[stat.ref_value].name if stat.ref_value
                              else "")


def op_type(metadata):
    """The op type of a host event named "name:Type" (its display name), else None (the
    runtime's own events: "EagerExecute", "ThreadpoolListener::Record", ...)."""
    if ":" not in metadata.name or "::" in metadata.name or " " in metadata.name:
        return None
    kind = metadata.display_name or metadata.name.rsplit(":", 1)[1]
    return kind.split("#")[0] or None


def kernel_type(plane, event, ids):
    """The op type that launched a kernel: for XLA's, "XLA " and its HLO op's kind (the
    `hlo_op` stat, "fusion.12" -> "XLA fusion"); else the TensorFlow op's type (`tf_op`,
    "name:Type"); else "(kernel) NAME". `ids`: the plane's {stat name: id} of the two."""
    values = {}
    for stat in event.stats:
        for name, i in ids.items():
            if stat.metadata_id == i:
                values[name] = stat_text(plane, stat)
    if values.get("hlo_op"):
        return "XLA " + values["hlo_op"].split(".")[0]
    op = values.get("tf_op", "").split("::")[0].split("#")[0]
    if op:
        return op.rsplit(":", 1)[-1]
    return "(kernel) " + plane.event_metadata[event.metadata_id].name[:60]


def self_times(events):
    """[(kind, self duration)] of one thread's (begin, duration, kind) events: an op that
    runs others inside it (a function call, a cond's branch) keeps only its own time."""
    out, stack = [], []  # stack: [end, index into out] of the enclosing events
    for begin, duration, kind in sorted(events, key=lambda e: (e[0], -e[1])):
        while stack and stack[-1][0] <= begin:
            stack.pop()
        if stack:
            parent = stack[-1][1]
            out[parent] = (out[parent][0], out[parent][1] - duration)
        out.append((kind, duration))
        stack.append((begin + duration, len(out) - 1))
    return out


def union_ps(intervals):
    """The length covered by the union of [begin, end) intervals."""
    total, reach = 0, None
    for begin, end in sorted(intervals):
        if reach is None or begin > reach:
            total += end - begin
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def ranked(totals, top):
    """[[type, seconds, count], ...] longest first: the first `top`, then "(other)"."""
    rows = sorted(totals.items(), key=lambda kv: -kv[1][0])
    out = [[kind, ps * PS, n] for kind, (ps, n) in rows[:top]]
    rest = rows[top:]
    if rest:
        out.append(["(other)", sum(ps for _, (ps, _) in rest) * PS,
                    sum(n for _, (_, n) in rest)])
    return out


def _add(totals, kind, duration_ps):
    ps, n = totals.get(kind, (0, 0))
    totals[kind] = (ps + duration_ps, n + 1)
