"""A training run: its parts built as one ``TrainingRun``, restored or initialised, and
stepped (``tfseg.training.stepper``: log, evaluate, checkpoint; a clean stop on signals
or NaN)."""

import contextlib
import dataclasses
import functools
import os

import keras
import numpy as np
import tensorflow as tf

from tfseg import data as data_lib
from tfseg.config import Config
from tfseg.config.config import flag_value
from tfseg.errors import InputError
from tfseg.evaluation.evaluate import eval_data
from tfseg.models.blocks import block_of
from tfseg.runtime import builders, checkpoints, files, init, xla_cache
from tfseg.runtime import device as device_lib
from tfseg.runtime.signals import StopRequest
from tfseg.split import split_for_run
from tfseg.training import losses, optim
from tfseg.training.lock import ModelDirLock
from tfseg.training.step import make_train_step
from tfseg.training.stepper import Stepper


def build_step(config, strategy, make_model, norm):
    """(model, optimizer, step counter, train step) of ``config``: the model is
    ``make_model(norm)`` (``norm``: ``builders.norm_for``'s, the one the strategy needs),
    under the strategy's scope, split across ``--model_devices`` if any
    (``tfseg.split.split_for_run``). The profiler measures this very step
    (``tfseg.profile.step``)."""
    with strategy.scope():
        model = make_model(norm)
        # A split model places its layers' ops itself: its loss takes its output.
        loss = losses.for_model(model, config.optim.class_weights,
                                resized=not config.run.model_devices)
        model = split_for_run(config, model, loss,
                              lambda: device_lib.overhead(config.run.device_overhead_gb).bytes)
        optimizer = optim.optimizer(config, model)
        step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    train_step = make_train_step(strategy, model, optimizer, loss,
                                 step, builders.jit_mode(config),
                                 *optim.l2_weight_decay(config, model),
                                 accum_steps=config.optim.grad_accum_steps,
                                 block_of=functools.partial(
                                     block_of, middle_repeats=config.model.middle_repeats))
    return model, optimizer, step, train_step


def _xla_words(config):
    """How the step is compiled, in the run's first lines: "XLA blocks (--jit_compile=
    auto on a GPU)", "no XLA", ..."""
    mode, given = builders.jit_mode(config), config.run.jit_compile
    words = {"off": "no XLA", "step": "XLA: the whole step", "blocks": "XLA: blocks"}[mode]
    if given != "auto":
        return words
    return words + (" (--jit_compile=auto: a GPU)" if mode == "blocks" else
                    " (--jit_compile=auto: no GPU)")


@dataclasses.dataclass
class TrainingRun:
    """The parts of one training run (``build``), before its checkpoint is restored.

    Attributes:
      data: the training split's ``tfseg.data.DataConfig`` (``builders.data_config``).
      eval_data: the evaluation split's (``tfseg.evaluation.evaluate.eval_data``), for
        ``--eval_every``.
      source: its ``tfseg.data.Source`` (class names, palette).
      norm: the norm the model was built with (``builders.norm_for``).
      model, optimizer: built under the strategy's scope (``build_step``).
      step: the optimizer updates applied, checkpointed.
      train_step: ``train_step(batch or [micro-batches]) -> (loss, finite, predictions)``.
      read: batches read, the step plus the batches of updates the loss-scale optimizer
        skipped: where the input resumes. This host's, outside the strategy's scope.
      ckpts: the run's ``tfseg.runtime.checkpoints.Checkpoints``.
    """

    data: data_lib.DataConfig
    eval_data: data_lib.DataConfig
    source: data_lib.Source
    norm: str
    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    step: tf.Variable
    train_step: object
    read: tf.Variable
    ckpts: checkpoints.Checkpoints


def build(config, strategy):
    """The ``TrainingRun`` of ``config`` on ``strategy``: its checkpoints not restored yet."""
    data = builders.data_config(config, training=True)
    evaluation = eval_data(config)
    norm = builders.norm_for(config, strategy)
    source = data_lib.get_source(data)
    if config.optim.class_weights and len(config.optim.class_weights) != source.num_classes:
        raise InputError(f"--class_weights: {len(config.optim.class_weights)} values for "
                         f"{source.num_classes} classes of {config.data.dataset}")
    model, optimizer, step, train_step = build_step(
        config, strategy, lambda norm: builders.model(config, source.num_classes, norm,
                                                      training=True), norm)
    read = tf.Variable(0, dtype=tf.int64, trainable=False, name="batches_read")
    ckpts = checkpoints.Checkpoints(model, config.run.model_dir, strategy,
                                    config.run.keep_checkpoints, optimizer=optimizer, step=step,
                                    batches_read=read)
    return TrainingRun(data, evaluation, source, norm, model, optimizer, step, train_step, read,
                       ckpts)


def train(config, log=print, stop=None, record=None):
    """Trains until ``config.optim.train_steps``, resuming from ``config.run.model_dir``.

    SIGTERM/SIGINT are caught from the start (``stop``: a ``StopRequest`` the
    caller entered earlier, else one of its own): during set-up they end the run
    before its first step; in training, after the step under way, with a save.

    Returns:
      A dict: "step" reached, "loss" (last), "stopped_by" (None, "SIGTERM", "SIGINT"),
      "checkpoint" (the last saved path).

    ``record``: more entries for the run's config.json (e.g. the memory plan that
    chose the model's variant, ``tfseg.budget.Choice.to_dict``).

    Raises:
      NonFiniteLoss: the loss was NaN/Inf, or too many updates in a row were skipped
        (nothing is saved after the last good step).
      InputError: bad flags or files, or another run holds ``model_dir``.
    """
    with contextlib.nullcontext(stop) if stop is not None else StopRequest() as stop:
        strategy = builders.strategy(config)
        if config.data.batch_size < strategy.num_replicas_in_sync:
            # A replica with an empty batch has no batch statistics: its norm gives NaN.
            raise InputError(f"--batch_size: {config.data.batch_size} is less than the "
                             f"{strategy.num_replicas_in_sync} replicas; give each at least "
                             f"one image")
        _check_record(config, log)  # before anything is written
        # Only the chief writes model_dir; the other workers' scratch folders are their own.
        lock = ModelDirLock(config.run.model_dir, log) if checkpoints.is_chief(strategy) else (
            contextlib.nullcontext())
        with lock:
            return _train(config, strategy, stop, log, record)


def _check_record(config, log):
    """config.json is the run's record: a damaged one is refused (``files.load_config``),
    and so is a resume that changes the settings deciding the model's variables
    (``Config.check_resume``), each in one line; any other change is said here, and
    recorded when training saves the config."""
    model_dir = config.run.model_dir
    saved = files.load_config(model_dir)
    if not saved:
        return
    source = os.path.join(model_dir, files.CONFIG_FILE)
    resuming = files.latest_checkpoint(model_dir) is not None
    changed = (Config.check_resume(saved, config, source) if resuming
               else Config.changes(saved, config))
    if changed:
        log(f"{'resuming' if resuming else 'starting'} with settings that differ from "
            f"{source} (which will record them): " + ", ".join(
                f"{flag} {flag_value(before)} -> {flag_value(now)}"
                for flag, (before, now) in changed.items()))


def _train(config, strategy, stop, log, record=None):
    """Prepares the run (``_prepare``), then steps it (``Stepper``) unless it is done or a
    stop came during set-up."""
    run, restored = _prepare(config, strategy, log, record)
    start = int(run.step.numpy())
    result = dict(step=start, loss=None, stopped_by=None, checkpoint=restored)
    if start >= config.optim.train_steps:
        log(f"already trained to step {start} (--train_steps={config.optim.train_steps})")
        return result
    if stop:
        result["stopped_by"] = stop.signal
        log(f"{stop.signal} during set-up: stopped before the first step; nothing to save")
        return result
    return Stepper(config, strategy, run, stop, log, result).run()


def _prepare(config, strategy, log, record):
    """(the built ``TrainingRun``, the checkpoint it resumed from or None): seeded,
    restored (or initialised from ``--init_checkpoint``), said, and its config.json saved."""
    run_settings, optim_settings = config.run, config.optim
    if run_settings.seed >= 0:
        # The initial weights and dropout too: with --deterministic, a run is repeatable.
        keras.utils.set_random_seed(run_settings.seed)
    builders.set_dtype_policy(config)
    if builders.jit_mode(config) != "off":  # before XLA's first compilation reads its flags
        xla_cache.use(config.run.compile_cache_dir, log)
    run = build(config, strategy)
    if run.ckpts.chief:
        run.ckpts.remove_leftovers()  # of saves a kill interrupted; we hold the folder's lock
    restored = run.ckpts.resume(log)
    if restored is None and run_settings.init_checkpoint:
        init.load(run.model, run_settings.init_checkpoint, log)  # weights only: step 0
    start = int(run.step.numpy())
    # A checkpoint saved before the count was kept restores none: the input goes on at
    # its step (the count is the step plus the skipped updates, never less).
    run.read.assign(max(int(run.read.numpy()), start * optim_settings.grad_accum_steps))
    log(f"{run.model.name}: {run.model.count_params():,} parameters, "
        f"{run.source.num_classes} classes, {run.norm} norm, "
        f"{strategy.num_replicas_in_sync} replica(s), {_xla_words(config)}; "
        + (f"resumed from {restored} at step {start}" if restored else
           f"from the weights of {run_settings.init_checkpoint}"
           if run_settings.init_checkpoint else "from scratch"))
    if run.ckpts.chief:
        log(f"{optim_settings.train_steps:,} steps of batch {config.data.batch_size} at "
            f"{'x'.join(map(str, config.data.crop_size))}; checkpoints every "
            f"{run_settings.checkpoint_every} steps, config.json and TensorBoard logs in "
            f"{run_settings.model_dir}")
        # Class names and palette too: predict and export then need no data set.
        files.save_config(config, run_settings.model_dir,
                          class_names=list(run.source.class_names),
                          palette=np.asarray(run.source.palette).tolist(), **(record or {}))
    return run, restored
