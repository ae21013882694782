"""Measure the memory and time of one full training step, each variant in a fresh process.

The recipe, as `measure_in_process` runs it:

1. Start a fresh Python process (`measure` does), so no other variant's tensors,
   allocator chunks or cached kernels are in it. On the CPU, run with
   `TF_ENABLE_ONEDNN_OPTS=1`: only oneDNN's allocator keeps statistics.
2. Build the model and a momentum-SGD optimizer; trace the step as a `tf.function`
   (forward, backward and `apply_gradients`) on fixed random inputs.
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

The allocator is the GPU's (`GPU:0`) when there is one, else `CPU:0`.

Run as a module to measure one configuration and print one JSON line:
`python -m tfseg.memory.measure '{"variant": "stock", "height": 513, ...}'`.
"""

import dataclasses
import gc
import importlib
import json
import os
import signal
import subprocess
import sys
import time

VARIANTS = ("stock", "memory_saving", "recompute")


@dataclasses.dataclass(frozen=True)
class StepConfig:
    """One training-step measurement.

    Args:
      variant: "stock" (Keras layers), "memory_saving" (fused ReLU+depthwise and
        output-only norms) or "recompute" (memory saving plus recompute of
        `recompute_blocks`, by default `tfseg.models.xception.DEFAULT_RECOMPUTE`;
        `blocks_used()` says which a variant uses).
      jit_compile: compile the step with XLA.
      dtype_policy: "float32", "mixed_bfloat16" or "mixed_float16".
      timed_steps: steps timed (and their peaks measured) after the measured one.
      analyze: also return the static analysis of the traced step
        (`tfseg.memory.analysis.step_breakdown`).
      analyze_batches: more batch sizes for the analysis to estimate the peak
        at (traced, not run), e.g. for the planner's slope.
      builder: None (DeepLabv3+ from the fields above), or (module, function
        name) of `f(config) -> keras.Model` to measure instead (e.g. a small
        stack in a test), imported by name since the config crosses to a fresh
        process as JSON. "memory_saving" then measures `tfseg.memory.rewrite`
        of its model; the model must take [batch, height, width, 3] images and
        return `num_classes` logits at that size.
    """

    variant: str = "stock"
    num_classes: int = 21
    output_stride: int = 16
    norm: str = "batch"
    width_multiplier: float = 1.0
    middle_repeats: int = 16
    height: int = 513
    width: int = 513
    batch: int = 2
    jit_compile: bool = False
    dtype_policy: str = "float32"
    recompute_blocks: tuple = None
    timed_steps: int = 2
    analyze: bool = False
    analyze_batches: tuple = ()
    builder: tuple = None

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        if self.builder is not None and self.variant == "recompute":
            raise ValueError('a builder\'s model has no backbone blocks to recompute: '
                             'measure "stock" or "memory_saving"')

    def blocks_used(self):
        """The backbone blocks this variant recomputes: () unless "recompute"."""
        if self.variant != "recompute":
            return ()
        if self.recompute_blocks is None:
            from tfseg.models.xception import DEFAULT_RECOMPUTE

            return tuple(DEFAULT_RECOMPUTE)
        return tuple(self.recompute_blocks)


def build_model(config):
    """The model `config` measures: DeepLabv3+, or `config.builder`'s (rewritten
    by `tfseg.memory.rewrite` unless the variant is "stock")."""
    if config.builder is not None:
        from tfseg.memory import rewrite

        module, name = config.builder
        model = getattr(importlib.import_module(module), name)(config)
        return model if config.variant == "stock" else rewrite(model)
    from tfseg.models import deeplab_v3_plus

    return deeplab_v3_plus(
        config.num_classes,
        output_stride=config.output_stride,
        norm=config.norm,
        width_multiplier=config.width_multiplier,
        middle_repeats=config.middle_repeats,
        memory_saving=config.variant != "stock",
        recompute=config.blocks_used() or None,
    )


def make_train_step(model, optimizer, loss_fn, jit_compile=False):
    """A compiled (forward, backward, update) step: (images, labels) -> loss."""
    import tensorflow as tf

    def step(images, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return tf.function(step, jit_compile=jit_compile)


def _device():
    import tensorflow as tf

    return "GPU:0" if tf.config.list_physical_devices("GPU") else "CPU:0"


def measure_in_process(config):
    """Measures `config` in this process; returns a dict of results."""
    import keras
    import numpy as np
    import tensorflow as tf

    keras.mixed_precision.set_global_policy(config.dtype_policy)
    keras.utils.set_random_seed(0)
    model = build_model(config)
    optimizer = keras.optimizers.SGD(0.001, momentum=0.9)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=255)
    step = make_train_step(model, optimizer, loss_fn, config.jit_compile)
    rng = np.random.RandomState(0)
    shape = (config.batch, config.height, config.width)
    images = tf.constant(rng.uniform(-1, 1, shape + (3,)).astype("float32"))
    labels = tf.constant(rng.randint(0, config.num_classes, shape).astype("int32"))
    device = _device()

    start = time.perf_counter()
    float(step(images, labels))  # warm-up: trace, build slots
    warmup = time.perf_counter() - start
    gc.collect()
    base = tf.config.experimental.get_memory_info(device)["current"]
    times, peaks, loss = [], [], None
    for _ in range(1 + config.timed_steps):
        tf.config.experimental.reset_memory_stats(device)
        start = time.perf_counter()
        value = float(step(images, labels))
        times.append(time.perf_counter() - start)
        peaks.append(int(tf.config.experimental.get_memory_info(device)["peak"] - base))
        loss = value if loss is None else loss
    analysis, start = None, time.perf_counter()
    if config.analyze:
        from tfseg.memory.analysis import step_breakdown
        from tfseg.models import part_of

        part = lambda name: part_of(name, config.middle_repeats)  # noqa: E731
        analysis = step_breakdown(step, (images, labels), model, part,
                                  extra_batches=tuple(config.analyze_batches))
    analysis_seconds = time.perf_counter() - start
    return {
        **dataclasses.asdict(config),
        "recompute_blocks": list(config.blocks_used()),
        "analysis": analysis,
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
    }


# The exit code of a measuring process that ran out of device memory.
OUT_OF_MEMORY_EXIT = 75


class OutOfMemory(RuntimeError):
    """The measured step did not fit: the allocator refused it (ResourceExhausted),
    or the system killed the process (SIGKILL, the OOM killer's signal)."""


def measure(config, timeout=None):
    """Measures `config` in a fresh Python process and returns its dict.

    A fresh process per variant, so that no allocator state, cached kernels or
    leftover tensors of another variant distort the peak. The result also has
    `wall_seconds`: how long the whole process took (start-up, build, tracing,
    steps, analysis).
    """
    # The CPU allocator keeps statistics only with oneDNN's allocator, so it is on
    # here whatever the parent process chose.
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", TF_ENABLE_ONEDNN_OPTS="1")
    payload = json.dumps(dataclasses.asdict(config))
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "tfseg.memory.measure", payload],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
        message = f"measuring {config.variant} failed (exit {proc.returncode}): {tail[0]}"
        if proc.returncode in (OUT_OF_MEMORY_EXIT, -signal.SIGKILL):
            raise OutOfMemory(message)
        raise RuntimeError(message)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall_seconds"] = time.perf_counter() - start
    return result


def measure_repeats(config, repeats=3, timeout=None):
    """`measure` in `repeats` fresh processes, as one result (recipe step 6).

    Only the first process runs `config.analyze`. Returns its dict, with
    `peak_over_base_bytes`, `base_bytes` and `step_seconds` the medians over the
    processes, `peak_over_base_max_bytes` the largest step peak of any, and
    `peak_over_base_by_process` each process's own (median) peak.
    """
    import statistics

    runs = [measure(config, timeout)]
    runs += [measure(dataclasses.replace(config, analyze=False, analyze_batches=()), timeout)
             for _ in range(repeats - 1)]
    peaks = [r["peak_over_base_bytes"] for r in runs]
    return {
        **runs[0],
        "repeats": repeats,
        "peak_over_base_bytes": int(statistics.median(peaks)),
        "peak_over_base_max_bytes": max(r["peak_over_base_max_bytes"] for r in runs),
        "peak_over_base_by_process": peaks,
        "base_bytes": int(statistics.median(r["base_bytes"] for r in runs)),
        "step_seconds": statistics.median(r["step_seconds"] for r in runs),
    }


def main(argv):
    import tensorflow as tf

    config = json.loads(argv[1])
    for key in ("recompute_blocks", "analyze_batches", "builder"):
        if config.get(key) is not None:
            config[key] = tuple(config[key])
    try:
        result = measure_in_process(StepConfig(**config))
    except tf.errors.ResourceExhaustedError as e:
        print(f"out of memory: {e.message.splitlines()[0]}", file=sys.stderr)
        sys.exit(OUT_OF_MEMORY_EXIT)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv)
