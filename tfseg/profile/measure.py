"""Measure the memory and time of one full training step, each variant in a fresh process.

The recipe, as `measure_in_process` runs it:

1. Start a fresh Python process (`measure` does), so no other variant's tensors,
   allocator chunks or cached kernels are in it. On the CPU, run with
   `TF_ENABLE_ONEDNN_OPTS=1`: only oneDNN's allocator keeps statistics.
2. Build, under the run's strategy and dtype policy, the model, the optimizer
   (`tfseg.runtime.builders.optimizer`: momentum SGD on the schedule, decoupled
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
   to step. Their median time is the step time.
6. Repeat in more fresh processes and take the median (`measure_repeats`): the
   allocator's chunk layout after the warm-up differs from process to process,
   and once in a while a whole process measures ~20-30% higher than its
   neighbours.

The allocator is that of `tfseg.runtime.device.name()`: `GPU:0` when there is one, else
`CPU:0`.

Run as a module to measure one configuration and print one JSON line:
`python -m tfseg.profile.measure '{"variant": "stock", "height": 513, ...}'`.
"""

import ctypes
import dataclasses
import gc
import json
import os
import re
import signal
import subprocess
import sys
import time
import traceback

from tfseg.profile.step import StepConfig, build_step, describe_optimizer
from tfseg.runtime import device as device_lib


def _analyze(config, step, batch, model):
    """`tfseg.profile.analysis.step_breakdown` of the traced step, with the recompute
    segments' costs (the budget planner's)."""
    from tfseg.models import part_of, segment_of
    from tfseg.profile.analysis import step_breakdown

    repeats = config.run.model.middle_repeats
    return step_breakdown(step, (batch,), model, lambda name: part_of(name, repeats),
                          extra_batches=tuple(config.analyze_batches),
                          segment_of=lambda name: segment_of(name, repeats))


def _batch(config, strategy):
    """The fixed random batch of `config` (its micro-batches with --grad_accum_steps),
    as the step takes it."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.RandomState(0)
    shape = (config.batch, config.height, config.width)
    images = tf.constant(rng.randint(0, 256, shape + (3,)).astype("uint8"))  # as the input's
    labels = tf.constant(rng.randint(0, config.num_classes, shape).astype("int32"))
    batch = (images, labels)
    if strategy.num_replicas_in_sync > 1:  # each replica its share of the global batch
        data = tf.data.Dataset.from_tensors(batch)
        batch = next(iter(strategy.experimental_distribute_dataset(data)))
    if config.run.optim.grad_accum_steps > 1:  # the step takes its micro-batches at once
        batch = [batch] * config.run.optim.grad_accum_steps
    return batch


def estimate_in_process(config):
    """The static estimate of `config`'s step, which is traced, never run: the
    analysis, and as base and peak its estimates (base: weights, optimizer state
    and the batch; peak: `tfseg.profile.simulate`'s)."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    strategy, model, optimizer, step = build_step(config)
    batch = _batch(config, strategy)
    start = time.perf_counter()
    analysis = _analyze(config, step, batch, model)
    # once per tensor: --grad_accum_steps repeats the same micro-batch
    unique = {id(t): t for t in tf.nest.flatten(batch)}.values()
    inputs = sum(t.shape.num_elements() * t.dtype.size for t in unique)
    return {
        **config.record(),
        "analysis": analysis,
        "estimated": True,
        "device": device_lib.name(),
        "parameters": int(model.count_params()),
        "base_bytes": analysis["parameter_bytes"] + analysis["optimizer_state_bytes"] + inputs,
        "peak_over_base_bytes": analysis["estimated_peak_bytes"],
        "analysis_seconds": time.perf_counter() - start,
        "replicas": strategy.num_replicas_in_sync,
    }


def measure_in_process(config):
    """Measures `config` in this process; returns a dict of results (the static
    estimate alone when `config.run_steps` is False)."""
    import keras
    import numpy as np

    if not config.run_steps:
        return estimate_in_process(config)
    keras.utils.set_random_seed(0)
    strategy, model, optimizer, step = build_step(config)
    batch = _batch(config, strategy)
    device = device_lib.name()

    start = time.perf_counter()
    float(step(batch)[0])  # warm-up: trace, grow the allocator's regions
    warmup = time.perf_counter() - start
    gc.collect()
    base = device_lib.memory_info()["current"]
    times, peaks, loss, applied = [], [], None, []
    for _ in range(1 + config.timed_steps):
        device_lib.reset_peak()
        start = time.perf_counter()
        value, finite, _ = step(batch)
        value = float(value)
        times.append(time.perf_counter() - start)
        peaks.append(int(device_lib.memory_info()["peak"] - base))
        loss = value if loss is None else loss
        applied.append(bool(finite))
    start = time.perf_counter()
    analysis = _analyze(config, step, batch, model) if config.analyze else None
    analysis_seconds = time.perf_counter() - start
    return {
        **config.record(),
        "analysis": analysis,
        "estimated": False,
        "device": device,
        "parameters": int(model.count_params()),
        "base_bytes": int(base),
        "peak_over_base_bytes": int(np.median(peaks)),
        "peak_over_base_max_bytes": max(peaks),
        "peak_over_base_by_step": peaks,
        "step_seconds": float(np.median(times)),
        "warmup_seconds": warmup,
        "analysis_seconds": analysis_seconds,
        "loss": loss,
        "finite_by_step": applied,
        "optimizer": describe_optimizer(config, model, optimizer),
        "replicas": strategy.num_replicas_in_sync,
    }


# The exit code of a measuring process that ran out of device memory.
OUT_OF_MEMORY_EXIT = 75


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
        [sys.executable, "-m", "tfseg.profile.measure", payload],
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

    Only the first process runs `config.analyze`. Returns `combine` of them. `stop`:
    as `measure`'s.
    """
    runs = [measure(config, timeout, stop)]
    runs += [measure(dataclasses.replace(config, analyze=False, analyze_batches=()), timeout,
                     stop) for _ in range(repeats - 1)]
    return combine(runs)


def combine(runs):
    """One result from `measure`'s results for the same step (each from its own
    process): the first's dict, with `peak_over_base_bytes`, `base_bytes` and
    `step_seconds` the medians over the processes, `peak_over_base_max_bytes` the
    largest step peak of any, `peak_over_base_by_process` and `step_seconds_by_process`
    each process's own."""
    import statistics

    peaks = [r["peak_over_base_bytes"] for r in runs]
    return {
        **runs[0],
        "repeats": len(runs),
        "peak_over_base_bytes": int(statistics.median(peaks)),
        "peak_over_base_max_bytes": max(r["peak_over_base_max_bytes"] for r in runs),
        "peak_over_base_by_process": peaks,
        "base_bytes": int(statistics.median(r["base_bytes"] for r in runs)),
        "step_seconds": statistics.median(r["step_seconds"] for r in runs),
        "step_seconds_by_process": [r["step_seconds"] for r in runs],
    }


def main(argv):
    import tensorflow as tf

    try:
        result = measure_in_process(StepConfig.from_json(json.loads(argv[1])))
    except tf.errors.ResourceExhaustedError as e:
        print(f"out of memory: {e.message.splitlines()[0]}", file=sys.stderr)
        sys.exit(OUT_OF_MEMORY_EXIT)
    except Exception as error:
        # The traceback, then the error on one last line: `measure` reports that line.
        traceback.print_exc()
        # Keras ends its messages with the call's arguments, and TF starts them with the
        # user-code trace: keep the end of the message proper.
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).split("Arguments received by")[0]
        print(f"{type(error).__name__}: ...{' '.join(text.split())[-300:]}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv)
