"""A training run's parts, built once from its config (``assemble``): the strategy, the
data configs and source, the model and its step, the checkpoints, the evaluation settings
and the compilation mode. The loop, the stepper and the periodic evaluation are handed
the ``TrainingRun``: none of them goes back to ``tfseg.runtime.builders`` or re-reads the
run's config.json."""

import contextlib
import dataclasses
import functools
import os

import keras
import tensorflow as tf

from tfseg import data as data_lib
from tfseg.config import Config
from tfseg.config.config import flag_value
from tfseg.errors import InputError
from tfseg.evaluation.evaluate import inference_config
from tfseg.evaluation.inference import InferenceConfig
from tfseg.models.blocks import block_of
from tfseg.runtime import builders, checkpoints, files, xla_cache
from tfseg.runtime import device as device_lib
from tfseg.split import split_for_run
from tfseg.training import losses, optim
from tfseg.training.lock import ModelDirLock
from tfseg.training.step import make_train_step


def build_step(config, strategy, make_model, norm):
    """(model, optimizer, step counter, train step) of ``config`` (``step_parts``), compiled
    as ``--jit_compile`` says (``builders.jit_mode``). The profiler measures this very step
    (``tfseg.profile.step``)."""
    return step_parts(config, strategy, make_model, norm, builders.jit_mode(config),
                      lambda: device_lib.overhead(config.run.device_overhead_gb).bytes)


def step_parts(config, strategy, make_model, norm, jit, overhead):
    """(model, optimizer, step counter, train step) of ``config``: the model is
    ``make_model(norm)`` (``norm``: ``builders.norm_for``'s, the one the strategy needs),
    under the strategy's scope, split across ``--model_devices`` if any
    (``tfseg.split.split_for_run``, which calls ``overhead()`` for the device's bytes
    outside TF's allocator); ``jit``: "off", "step" or "blocks" (``builders.jit_mode``)."""
    with strategy.scope():
        model = make_model(norm)
        # A split model places its layers' ops itself: its loss takes its output.
        loss = losses.for_model(model, config.optim.class_weights,
                                resized=not config.run.model_devices)
        model = split_for_run(config, model, loss, overhead)
        optimizer = optim.optimizer(config, model)
        step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    train_step = make_train_step(strategy, model, optimizer, loss, step, jit,
                                 *optim.l2_weight_decay(config, model),
                                 accum_steps=config.optim.grad_accum_steps,
                                 block_of=functools.partial(
                                     block_of, middle_repeats=config.model.middle_repeats))
    return model, optimizer, step, train_step


@dataclasses.dataclass
class TrainingRun:
    """The parts of one training run (``assemble``), before its checkpoint is restored.

    Attributes:
      config: the run's ``tfseg.config.Config``, for its settings.
      strategy: its ``tf.distribute`` strategy (``builders.strategy``).
      jit: how the step is compiled: "off", "step" or "blocks" (``builders.jit_mode``).
      data: the training split's ``tfseg.data.DataConfig`` (``builders.data_config``).
      eval_data: the evaluation split's, whole images at batch 1, for ``--eval_every``.
      inference: ``--eval_every``'s ``InferenceConfig``: one whole-image pass.
      norm: the norm the model is built with (``builders.norm_for``).
      source: the training split's ``tfseg.data.Source`` (class names, palette).
      model, optimizer: built under the strategy's scope (``step_parts``).
      step: the optimizer updates applied, checkpointed.
      train_step: ``train_step(batch or [micro-batches]) -> (loss, finite, predictions)``.
      read: batches read, the step plus the batches of updates the loss-scale optimizer
        skipped: where the input resumes. This host's, outside the strategy's scope.
      ckpts: the run's ``tfseg.runtime.checkpoints.Checkpoints``.
      held: what the run holds until it is closed (``model_dir``'s lock).
    """

    config: Config
    strategy: tf.distribute.Strategy
    jit: str
    data: data_lib.DataConfig
    eval_data: data_lib.DataConfig
    inference: InferenceConfig
    norm: str
    source: data_lib.Source
    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    step: tf.Variable
    train_step: object
    read: tf.Variable
    ckpts: checkpoints.Checkpoints
    held: contextlib.ExitStack = dataclasses.field(default_factory=contextlib.ExitStack)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.held.__exit__(*exc)  # the lock learns whether the run failed (ModelDirLock)
        return False


def assemble(config, saved, resuming, log=print):
    """The ``TrainingRun`` of ``config``, its checkpoints not restored yet, holding
    ``model_dir`` (``ModelDirLock``, on the chief) until it is closed: use it as a context.

    Args:
      saved: the run's config.json dict (``files.load_config``; {} for none): the run's
        record, checked first, before anything is written. A resume that changes the
        settings deciding the model's variables is refused (``Config.check_resume``) in
        one line; any other change is said, and recorded when the run saves its config.
      resuming: whether ``model_dir`` holds a checkpoint (``files.latest_checkpoint``).
      log: called with each line.

    Then the folder's lock is taken, and only then the parts are built (``_build``).

    Example:
        with assemble(Config(), {}, False) as run:
            print(run.model.name, run.source.num_classes, run.jit)
    """
    lock = ModelDirLock(config.run.model_dir, log)  # taken once the record is checked
    inference = inference_config(config, mode="whole")
    strategy = builders.strategy(config)
    jit = builders.jit_mode(config)
    data = builders.data_config(config, training=True)
    # Whole images at batch 1: no padding to mask out (as evaluation.evaluate.eval_data).
    evaluation = builders.data_config(config, training=False, batch_size=1)
    norm = builders.norm_for(config, strategy)
    # Only the chief writes model_dir; the other workers' scratch folders are their own.
    chief = checkpoints.is_chief(strategy)

    def overhead():  # measured only where a split across --model_devices needs it
        return device_lib.overhead(config.run.device_overhead_gb).bytes

    if config.data.batch_size < strategy.num_replicas_in_sync:
        # A replica with an empty batch has no batch statistics: its norm gives NaN.
        raise InputError(f"--batch_size: {config.data.batch_size} is less than the "
                         f"{strategy.num_replicas_in_sync} replicas; give each at least "
                         f"one image")
    config_json = os.path.join(config.run.model_dir, files.CONFIG_FILE)
    changed = (Config.check_resume(saved, config, config_json) if resuming
               else Config.changes(saved, config)) if saved else {}
    if changed:
        log(f"{'resuming' if resuming else 'starting'} with settings that differ from "
            f"{config_json} (which will record them): " + ", ".join(
                f"{flag} {flag_value(before)} -> {flag_value(now)}"
                for flag, (before, now) in changed.items()))
    with contextlib.ExitStack() as held:
        if chief:
            held.enter_context(lock)
        built = _build(config, strategy, jit, data, norm, overhead, log)
        # A failed build has let go of the folder; a built run holds it until closed.
        return TrainingRun(config, strategy, jit, data, evaluation, inference, norm, **built,
                           held=held.pop_all())


def _build(config, strategy, jit, data, norm, overhead, log):
    """The parts of ``config``'s run that ``assemble`` builds once it holds the folder, by
    ``TrainingRun``'s names: seeded first (the initial weights and dropout too: with
    --deterministic, a run is repeatable), in the run's dtype policy, with XLA's compile
    cache on before its first compilation."""
    if config.run.seed >= 0:
        keras.utils.set_random_seed(config.run.seed)
    builders.set_dtype_policy(config)
    if jit != "off":
        xla_cache.use(config.run.compile_cache_dir, log)
    source = data_lib.get_source(data)
    classes, weights = source.num_classes, config.optim.class_weights
    if weights and len(weights) != classes:
        raise InputError(f"--class_weights: {len(weights)} values for {classes} classes "
                         f"of {config.data.dataset}")
    model, optimizer, step, train_step = step_parts(
        config, strategy, lambda norm: builders.model(config, classes, norm, training=True),
        norm, jit, overhead)
    read = tf.Variable(0, dtype=tf.int64, trainable=False, name="batches_read")
    ckpts = checkpoints.Checkpoints(model, config.run.model_dir, strategy,
                                    config.run.keep_checkpoints, optimizer=optimizer,
                                    step=step, batches_read=read)
    return dict(source=source, model=model, optimizer=optimizer, step=step,
                train_step=train_step, read=read, ckpts=ckpts)
