"""Measure the memory and time of one full training step, each variant in a fresh process.

The recipe, as `tfseg.profile.child.measure_in_process` runs it:

1. Start a fresh Python process (`measure` does), so no other variant's tensors,
   allocator chunks or cached kernels are in it. On the CPU, run with
   `TF_ENABLE_ONEDNN_OPTS=1`: only oneDNN's allocator keeps statistics.
2. Build, under the run's strategy and dtype policy, the model, the optimizer
   (`tfseg.training.optim.optimizer`: momentum SGD on the schedule, decoupled
   decay or a `LossScaleOptimizer` when the settings say so) and the training
   step itself (`tfseg.training.step.make_train_step`: `PixelLoss`, the L2 term,
   the finite check before the update), exactly as `--mode=train` builds them
   (`tfseg.profile.step` builds it with the loop's own `build_step`); trace it on a fixed
   random batch.
3. Run one warm-up step: it traces, builds the optimizer slots and grows the
   allocator's regions.
4. `gc.collect()`; read `base = get_memory_info(device)["current"]`: the weights,
   the slots, the inputs and whatever the traced step holds between calls (e.g.
   constants that Grappler materialised in it).
5. `reset_memory_stats(device)`, run one step, read `peak`; report `peak - base`:
   the forward activations, the backward working set and the update, without
   the weights and slots that were there before. The `timed_steps` that follow
   are measured the same way (a reset before each, each peak over the same
   `base`, so that `base + peak` is always the step's total). The median of
   these peaks is the result (the largest is kept beside it), since the
   executor's scheduling of concurrent branches makes the peak vary from step
   to step. Their median time is the step time. A peak the allocator cannot measure
   (on the CPU it counts no buffer under 256 KiB: `tfseg.runtime.peak`) is None, and
   so is any median or largest of peaks that holds one.
6. Repeat in more fresh processes and take the median (`measure_repeats`): the
   allocator's chunk layout after the warm-up differs from process to process,
   and once in a while a whole process measures ~20-30% higher than its
   neighbours.

The allocator is that of `tfseg.runtime.device.name()`: `GPU:0` when there is one, else
`CPU:0`.

The measuring process is `python -m tfseg.profile.child '{"variant": "stock", ...}'`: one
configuration, one JSON line.
"""

import ctypes
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

from tfseg.profile.child import OUT_OF_MEMORY_EXIT
from tfseg.runtime import peak as peak_lib


class OutOfMemory(RuntimeError):
    """The measured step did not fit: the allocator refused it (ResourceExhausted),
    or the system killed the process (SIGKILL, the OOM killer's signal)."""


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def dies_with_parent():
    """A ``preexec_fn`` that ties a child process to this one, or None where the system
    cannot (not Linux): the kernel sends the child SIGKILL when this process ends, however
    it ends (a SIGTERM under its default handling, a kill -9), so that no measuring
    process runs on, orphaned, for the seconds its step takes. (An exception in the
    parent is ``subprocess.run``'s to handle: it kills the child before raising.)"""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the child
    except (OSError, AttributeError):
        return None
    parent, kill = os.getpid(), int(signal.SIGKILL)

    def tie():  # in the child, between fork and exec: no imports, no locks
        prctl(_PR_SET_PDEATHSIG, kill)
        if os.getppid() != parent:  # the parent ended before the tie was made
            os._exit(1)
    return tie


class Stopped(Exception):
    """A stop request (SIGTERM, Ctrl-C) ended a measurement: its process was killed."""


def measure(config, timeout=None, stop=None):
    """Measures `config` in a fresh Python process and returns its dict.

    A fresh process per variant, so that no allocator state, cached kernels or
    leftover tensors of another variant distort the peak. The result also has
    `wall_seconds`: how long the whole process took (start-up, build, tracing,
    steps, analysis).

    Args:
      timeout: seconds, after which the process is killed (`subprocess.TimeoutExpired`).
      stop: true once a stop is requested (a `tfseg.runtime.signals.StopRequest`): the
        process is killed within a quarter second and `Stopped` is raised, rather than
        waiting the tens of seconds a measured step can take.
    """
    # The CPU allocator keeps statistics only with oneDNN's allocator, so it is on
    # here whatever the parent process chose.
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1",
               TF_ENABLE_ONEDNN_OPTS="1")
    payload = json.dumps(config.to_json())
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfseg.profile.child", payload],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=dies_with_parent(),
    )
    stdout, stderr = _wait(proc, timeout, stop)
    if proc.returncode != 0:
        tail = stderr.strip().splitlines()[-1:] or ["(no output)"]
        message = f"measuring {config.variant} failed (exit {proc.returncode}): {tail[0]}"
        if proc.returncode in (OUT_OF_MEMORY_EXIT, -signal.SIGKILL):
            raise OutOfMemory(message)
        raise RuntimeError(message)
    result = json.loads(stdout.strip().splitlines()[-1])
    result["wall_seconds"] = time.perf_counter() - start
    return result


def _wait(proc, timeout, stop):
    """(stdout, stderr) of `proc` once it ends, looking at `stop` and the `timeout`
    every quarter second; on either, or any exception here, the process is killed (as
    `subprocess.run` kills it) before raising."""
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            try:
                return proc.communicate(timeout=0.25)
            except subprocess.TimeoutExpired:
                if stop:
                    raise Stopped(getattr(stop, "signal", None)) from None
                if deadline is not None and time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(proc.args, timeout) from None
    except BaseException:
        proc.kill()
        proc.communicate()
        raise


def measure_repeats(config, repeats=3, timeout=None, stop=None):
    """`measure` in `repeats` fresh processes, as one result (recipe step 6).

    Only the first process runs `config.analyze` and `config.launches`. Returns `combine`
    of them. `stop`: as `measure`'s.
    """
    runs = [measure(config, timeout, stop)]
    later = dataclasses.replace(config, analyze=False, analyze_batches=(), launches=False)
    runs += [measure(later, timeout, stop) for _ in range(repeats - 1)]
    return combine(runs)


def combine(runs):
    """One result from `measure`'s results for the same step (each from its own
    process): the first's dict, with `peak_over_base_bytes`, `base_bytes` and
    `step_seconds` the medians over the processes, `peak_over_base_max_bytes` the
    largest step peak of any, `peak_over_base_by_process` and `step_seconds_by_process`
    each process's own; `compile_seconds` the first process's (None without XLA: the
    later ones may read what it compiled from `--compile_cache_dir`'s cache), and
    `compile_seconds_by_process` each one's. A peak unknown in any process (None) is
    unknown in the result."""
    import statistics

    peaks = [r["peak_over_base_bytes"] for r in runs]
    return {
        **runs[0],
        "repeats": len(runs),
        "peak_over_base_bytes": peak_lib.median(peaks),
        "peak_over_base_max_bytes": peak_lib.largest([r["peak_over_base_max_bytes"]
                                                      for r in runs]),
        "peak_over_base_by_process": peaks,
        "base_bytes": int(statistics.median(r["base_bytes"] for r in runs)),
        "step_seconds": statistics.median(r["step_seconds"] for r in runs),
        "step_seconds_by_process": [r["step_seconds"] for r in runs],
        "compile_seconds_by_process": [r.get("compile_seconds") for r in runs],
    }
