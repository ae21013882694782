"""Measure the memory and time of one full training step, each variant in a fresh process.

The recipe, as `measure_in_process` runs it:

1. Start a fresh Python process (`measure` does), so no other variant's tensors,
   allocator chunks or cached kernels are in it. On the CPU, run with
   `TF_ENABLE_ONEDNN_OPTS=1`: only oneDNN's allocator keeps statistics.
2. Build, under the run's strategy and dtype policy, the model, the optimizer
   (`tfseg.train.builders.optimizer`: momentum SGD on the schedule, decoupled
   decay or a `LossScaleOptimizer` when the settings say so) and the training
   step itself (`tfseg.train.step.make_train_step`: `PixelLoss`, the L2 term,
   the finite check before the update), exactly as `--mode=train` builds them
   (`StepConfig.run_config` carries the settings over); trace it on a fixed
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

The allocator is the GPU's (`GPU:0`) when there is one, else `CPU:0`.

Run as a module to measure one configuration and print one JSON line:
`python -m tfseg.profile.measure '{"variant": "stock", "height": 513, ...}'`.
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
      dtype_policy: "float32", "mixed_bfloat16" or "mixed_float16" (then the
        optimizer is a `LossScaleOptimizer`, as in training).
      strategy, learning_rate, momentum, weight_decay, weight_decay_type,
        class_weights, dropout: as `tfseg.train.config.RunConfig`'s fields
        (its defaults): the measured step is the one training builds from them
        (`run_config`, `from_run_config`).
      timed_steps: steps timed (and their peaks measured) after the measured one.
      analyze: also return the static analysis of the traced step
        (`tfseg.profile.analysis.step_breakdown`).
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
    dropout: float = 0.1
    height: int = 513
    width: int = 513
    batch: int = 2
    jit_compile: bool = False
    dtype_policy: str = "float32"
    strategy: str = "default"
    learning_rate: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 4e-5
    weight_decay_type: str = "l2"
    class_weights: tuple = ()
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
        if self.class_weights and len(self.class_weights) != self.num_classes:
            from tfseg.errors import InputError

            raise InputError(f"--class_weights: {len(self.class_weights)} values for "
                             f"{self.num_classes} classes")
        self.run_config()  # the training settings are valid (InputError naming the flag if not)

    def blocks_used(self):
        """The backbone blocks this variant recomputes: () unless "recompute"."""
        if self.variant != "recompute":
            return ()
        if self.recompute_blocks is None:
            from tfseg.models.xception import DEFAULT_RECOMPUTE

            return tuple(DEFAULT_RECOMPUTE)
        return tuple(self.recompute_blocks)

    def run_config(self):
        """The `tfseg.train.config.RunConfig` whose training step this measures:
        the model, optimisation, dtype and strategy fields; the rest (data, crop,
        schedule length) are RunConfig's defaults and play no part in the step."""
        from tfseg.train.config import RunConfig

        return RunConfig(
            output_stride=self.output_stride, norm=self.norm,
            width_multiplier=self.width_multiplier, middle_repeats=self.middle_repeats,
            dropout=self.dropout, memory_saving=self.variant != "stock",
            recompute=self.blocks_used(), dtype_policy=self.dtype_policy,
            jit_compile=self.jit_compile, strategy=self.strategy,
            learning_rate=self.learning_rate, end_learning_rate=0.0,
            momentum=self.momentum, weight_decay=self.weight_decay,
            weight_decay_type=self.weight_decay_type,
            class_weights=tuple(self.class_weights))

    @classmethod
    def from_run_config(cls, config, num_classes, **fields):
        """The step `--mode=train` with `config`'s flags runs: its model, crop,
        batch, dtype policy, strategy, jit, optimizer, weight decay and class
        weights. `fields` override (e.g. `variant`, `timed_steps`)."""
        settings = dict(
            num_classes=num_classes, output_stride=config.output_stride, norm=config.norm,
            width_multiplier=config.width_multiplier, middle_repeats=config.middle_repeats,
            dropout=config.dropout, height=config.crop_size[0], width=config.crop_size[1],
            batch=config.batch_size, jit_compile=config.jit_compile,
            dtype_policy=config.dtype_policy, strategy=config.strategy,
            learning_rate=config.learning_rate, momentum=config.momentum,
            weight_decay=config.weight_decay, weight_decay_type=config.weight_decay_type,
            class_weights=tuple(config.class_weights))
        settings.update(fields)
        return cls(**settings)


def build_model(config, norm=None):
    """The model `config` measures: DeepLabv3+ as `tfseg.train.builders.model`
    builds it for training (with the strategy's `norm`), or `config.builder`'s
    (rewritten by `tfseg.memory.rewrite` unless the variant is "stock")."""
    if config.builder is not None:
        from tfseg.memory import rewrite

        module, name = config.builder
        model = getattr(importlib.import_module(module), name)(config)
        return model if config.variant == "stock" else rewrite(model)
    from tfseg.train import builders

    return builders.model(config.run_config(), config.num_classes, norm)


def build_step(config):
    """The training step `config` describes, built as `tfseg.train.loop` builds it.

    Sets the dtype policy; returns (strategy, model, optimizer, step), where
    `step(batch)` is `tfseg.train.step.make_train_step`'s distributed step.
    """
    import tensorflow as tf

    from tfseg.train import builders
    from tfseg.train.step import PixelLoss, make_train_step

    run = config.run_config()
    strategy = builders.strategy(run)
    builders.set_dtype_policy(run)
    with strategy.scope():
        model = build_model(config, builders.norm_for(run, strategy))
        optimizer = builders.optimizer(run, model)
        counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    step = make_train_step(strategy, model, optimizer, PixelLoss(run.class_weights), counter,
                           run.jit_compile, *builders.l2_weight_decay(run, model))
    return strategy, model, optimizer, step


def describe_optimizer(config, model, optimizer):
    """What the built step optimises with: a record of what ran, for the result."""
    from tfseg.train import builders

    inner = getattr(optimizer, "inner_optimizer", optimizer)
    l2_weight, l2_kernels = builders.l2_weight_decay(config.run_config(), model)
    return {
        "class": type(optimizer).__name__,
        "inner_class": type(inner).__name__,
        "momentum": float(inner.momentum),
        "decoupled_weight_decay": float(inner.weight_decay or 0.0),
        "l2_weight_decay": float(l2_weight),
        "l2_kernels": len(l2_kernels),
        "momentum_slots": len(getattr(inner, "momentums", None) or ()),
    }


def _device():
    import tensorflow as tf

    return "GPU:0" if tf.config.list_physical_devices("GPU") else "CPU:0"


def measure_in_process(config):
    """Measures `config` in this process; returns a dict of results."""
    import keras
    import numpy as np
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    strategy, model, optimizer, step = build_step(config)
    rng = np.random.RandomState(0)
    shape = (config.batch, config.height, config.width)
    images = tf.constant(rng.uniform(-1, 1, shape + (3,)).astype("float32"))
    labels = tf.constant(rng.randint(0, config.num_classes, shape).astype("int32"))
    batch = (images, labels)
    if strategy.num_replicas_in_sync > 1:  # each replica its share of the global batch
        data = tf.data.Dataset.from_tensors(batch)
        batch = next(iter(strategy.experimental_distribute_dataset(data)))
    device = _device()

    start = time.perf_counter()
    float(step(batch)[0])  # warm-up: trace, grow the allocator's regions
    warmup = time.perf_counter() - start
    gc.collect()
    base = tf.config.experimental.get_memory_info(device)["current"]
    times, peaks, loss, applied = [], [], None, []
    for _ in range(1 + config.timed_steps):
        tf.config.experimental.reset_memory_stats(device)
        start = time.perf_counter()
        value, finite, _ = step(batch)
        value = float(value)
        times.append(time.perf_counter() - start)
        peaks.append(int(tf.config.experimental.get_memory_info(device)["peak"] - base))
        loss = value if loss is None else loss
        applied.append(bool(finite))
    analysis, start = None, time.perf_counter()
    if config.analyze:
        from tfseg.profile.analysis import step_breakdown
        from tfseg.models import part_of

        part = lambda name: part_of(name, config.middle_repeats)  # noqa: E731
        analysis = step_breakdown(step, (batch,), model, part,
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
        "finite_by_step": applied,
        "optimizer": describe_optimizer(config, model, optimizer),
        "replicas": strategy.num_replicas_in_sync,
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
        [sys.executable, "-m", "tfseg.profile.measure", payload],
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
    for key in ("recompute_blocks", "analyze_batches", "builder", "class_weights"):
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
