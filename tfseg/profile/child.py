"""The measuring process: one training step of a `StepConfig`, measured as the recipe in
`tfseg.profile.measure` says, printed as one JSON line.

`python -m tfseg.profile.child '{"variant": "stock", "height": 513, ...}'` (what
`tfseg.profile.measure.measure` runs in a fresh process).
"""

import gc
import json
import re
import sys
import time
import traceback

from tfseg.profile import launches
from tfseg.profile.step import StepConfig, build_step, describe_optimizer
from tfseg.runtime import builders
from tfseg.runtime import device as device_lib
from tfseg.runtime import peak as peak_lib

# The exit code of a measuring process that ran out of device memory.
OUT_OF_MEMORY_EXIT = 75


def parts(config):
    """(part_of, rollup) of `config`'s model, for the analysis: `part_of(layer name)` is
    its part ("" for none), and `rollup` the subtotals the report sums,
    {"backbone": Xception-65's flows, from its block specs}. DeepLabv3+ on another
    backbone is one flat model: every layer the head's names (`part_of`) do not claim
    is the "backbone" part, with no roll-up; a builder's model has neither."""
    from tfseg.models import XCEPTION65, part_of

    repeats = config.run.model.middle_repeats
    if config.builder is not None:
        return (lambda name: part_of(name, repeats)), {}
    if config.run.model.backbone != "xception65":
        return (lambda name: part_of(name, repeats) or ("backbone" if name else "")), {}
    flows = tuple(dict.fromkeys(spec.flow for spec in XCEPTION65))
    return (lambda name: part_of(name, repeats)), {"backbone": flows}


def _analyze(config, step, batch, model, optimizer=None):
    """`tfseg.profile.analysis.step_breakdown` of the traced step, with the recompute
    segments' costs (the budget planner's), its parts and their roll-up (`parts`)."""
    from tfseg.models import segment_of
    from tfseg.profile.analysis import step_breakdown

    repeats = config.run.model.middle_repeats
    part_of, rollup = parts(config)
    return step_breakdown(step, (batch,), model, part_of,
                          extra_batches=tuple(config.analyze_batches),
                          segment_of=lambda name: segment_of(name, repeats),
                          optimizer=optimizer, rollup=rollup)


def sample_batch(config, strategy):
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
    batch = sample_batch(config, strategy)
    start = time.perf_counter()
    analysis = _analyze(config, step, batch, model, optimizer)
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
    batch = sample_batch(config, strategy)
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
        # None where the allocator counted too little of the step (`tfseg.runtime.peak`).
        peaks.append(peak_lib.measured(int(device_lib.memory_info()["peak"] - base), device))
        loss = value if loss is None else loss
        applied.append(bool(finite))
    # After the measured steps: the profiler's own buffers stay out of their peaks.
    counted = (launches.count(lambda: float(step(batch)[0])).to_dict()
               if config.launches else {})
    mode = builders.jit_mode(config.run_config())
    start = time.perf_counter()
    analysis = _analyze(config, step, batch, model, optimizer) if config.analyze else None
    analysis_seconds = time.perf_counter() - start
    return {
        **config.record(),
        "analysis": analysis,
        "estimated": False,
        "device": device,
        "parameters": int(model.count_params()),
        "base_bytes": int(base),
        "peak_over_base_bytes": peak_lib.median(peaks),
        "peak_over_base_max_bytes": peak_lib.largest(peaks),
        "peak_over_base_by_step": peaks,
        "step_seconds": float(np.median(times)),
        "warmup_seconds": warmup,
        "jit_mode": mode,
        "compile_seconds": launches.compile_seconds(mode, warmup, float(np.median(times))),
        **counted,
        "analysis_seconds": analysis_seconds,
        "loss": loss,
        "finite_by_step": applied,
        "optimizer": describe_optimizer(config, model, optimizer),
        "replicas": strategy.num_replicas_in_sync,
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
