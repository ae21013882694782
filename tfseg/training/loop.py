"""The training loop: resume, step, log, evaluate, checkpoint; stop cleanly on signals or NaN.

The loop reads the steps' results (loss, finite check, step counter) only where it acts:
at log, eval and checkpoint steps, on a stop and at the end (``tfseg.training.outcomes``);
in between the host queues the next step without waiting for the device."""

import contextlib
import os
import time

import keras
import numpy as np
import tensorflow as tf

from tfseg import data as data_lib
from tfseg.config import Config
from tfseg.config.config import flag_value
from tfseg.errors import InputError, NonFiniteLoss
from tfseg.evaluation.evaluate import PeriodicEval
from tfseg.runtime import builders, checkpoints, files, init, summaries
from tfseg.runtime.signals import StopRequest
from tfseg.training import losses
from tfseg.training.lock import ModelDirLock
from tfseg.training.outcomes import Outcomes, SkippedUpdates
from tfseg.training.progress import Progress, memory_peak
from tfseg.training.step import make_train_step


def build_step(config, strategy, make_model):
    """(model, optimizer, step counter, train step) of ``config``: the model is
    ``make_model(norm)``, under the strategy's scope with the norm it needs, split across
    ``--model_devices`` if any (``builders.split``). The profiler measures this very
    step (``tfseg.profile.step``)."""
    norm = builders.norm_for(config, strategy)
    with strategy.scope():
        model = make_model(norm)
        loss = losses.for_model(model, config.optim.class_weights)
        model = builders.split(config, model, loss)
        optimizer = builders.optimizer(config, model)
        step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    train_step = make_train_step(strategy, model, optimizer, loss,
                                 step, config.run.jit_compile,
                                 *builders.l2_weight_decay(config, model),
                                 accum_steps=config.optim.grad_accum_steps)
    return model, optimizer, step, train_step


def build(config, strategy):
    """The data set's source, the training step's parts (``build_step``), the batches-read
    counter and the checkpoints (not restored yet).

    Batches read is the step plus the batches of updates that the loss-scale optimizer
    skipped: it says where the input resumes. It is this host's, outside the
    strategy's scope.
    """
    source = builders.source(config, training=True)
    if config.optim.class_weights and len(config.optim.class_weights) != source.num_classes:
        raise InputError(f"--class_weights: {len(config.optim.class_weights)} values for "
                         f"{source.num_classes} classes of {config.data.dataset}")
    model, optimizer, step, train_step = build_step(
        config, strategy, lambda norm: builders.model(config, source.num_classes, norm,
                                                      training=True))
    read = tf.Variable(0, dtype=tf.int64, trainable=False, name="batches_read")
    ckpts = checkpoints.Checkpoints(model, config.run.model_dir, strategy,
                                    config.run.keep_checkpoints, optimizer=optimizer, step=step,
                                    batches_read=read)
    return source, model, optimizer, step, train_step, read, ckpts


def periodic_eval(config, model, source, chief):
    """``evaluate(step)`` for ``--eval_every``, or None: off, or not the chief (which owns
    the TensorBoard files; inference needs no other worker)."""
    if not config.run.eval_every or not chief:
        return None
    return PeriodicEval(config, model, source.class_names)


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
    run, optim = config.run, config.optim
    if run.seed >= 0:
        # The initial weights and dropout too: with --deterministic, a run is repeatable.
        keras.utils.set_random_seed(run.seed)
    builders.set_dtype_policy(config)
    source, model, optimizer, step, train_step, read, ckpts = build(config, strategy)
    norm = builders.norm_for(config, strategy)
    if ckpts.chief:
        ckpts.remove_leftovers()  # of saves a kill interrupted; we hold the folder's lock
    restored = ckpts.resume(log)
    if restored is None and run.init_checkpoint:
        init.load(model, run.init_checkpoint, log)  # weights only: step 0, fresh momentum
    start = int(step.numpy())
    # A checkpoint saved before the count was kept restores none: the input goes on at
    # its step (the count is the step plus the skipped updates, never less).
    read.assign(max(int(read.numpy()), start * optim.grad_accum_steps))
    log(f"{model.name}: {model.count_params():,} parameters, {source.num_classes} classes, "
        f"{norm} norm, {strategy.num_replicas_in_sync} replica(s); "
        + (f"resumed from {restored} at step {start}" if restored else
           f"from the weights of {run.init_checkpoint}" if run.init_checkpoint else
           "from scratch"))
    if ckpts.chief:
        log(f"{optim.train_steps:,} steps of batch {config.data.batch_size} at "
            f"{'x'.join(map(str, config.data.crop_size))}; checkpoints every "
            f"{run.checkpoint_every} steps, config.json and TensorBoard logs in {run.model_dir}")
    if ckpts.chief:
        # Class names and palette too: predict and export then need no data set.
        files.save_config(config, run.model_dir, class_names=list(source.class_names),
                          palette=np.asarray(source.palette).tolist(), **(record or {}))
    result = dict(step=start, loss=None, stopped_by=None, checkpoint=restored)
    if start >= optim.train_steps:
        log(f"already trained to step {start} (--train_steps={optim.train_steps})")
        return result
    if stop:
        result["stopped_by"] = stop.signal
        log(f"{stop.signal} during set-up: stopped before the first step; nothing to save")
        return result

    # The input goes on where the checkpoint's left it. Outside the strategy's scope: the
    # pipeline's counters are this host's, not mirrored.
    dataset, data_stats = data_lib.build_dataset_with_stats(
        builders.data_config(config, training=True), training=True,
        start_batch=int(read.numpy()))
    batches = data_lib.iterate(data_lib.distribute(dataset, strategy))
    evaluate = periodic_eval(config, model, source, ckpts.chief)
    writer = (tf.summary.create_file_writer(os.path.join(run.model_dir, "train"))
              if ckpts.chief else tf.summary.create_noop_writer())
    progress = Progress(optim.train_steps, start)
    window_start, window_steps = time.perf_counter(), 0
    saved_at = start if restored else None  # the step whose checkpoint is on disk
    skipped = SkippedUpdates(run.max_skipped_updates, log)

    outcomes = Outcomes(start)  # the steps' results, read only where the loop acts

    def due(at):
        """Whether the loop acts at step ``at``: logs, evaluates, saves or ends."""
        return (at % run.log_every == 0 or at % run.checkpoint_every == 0
                or at >= optim.train_steps or bool(evaluate and at % run.eval_every == 0))

    with writer.as_default():
        accum = optim.grad_accum_steps
        while outcomes.ahead < optim.train_steps:
            # --grad_accum_steps: one update of `accum` micro-batches, all counted as read.
            micro = [next(batches) for _ in range(accum)]
            loss, finite, predictions = train_step(micro[0] if accum == 1 else micro)
            read.assign_add(accum)
            outcomes.add(loss, finite, step.read_value())
            window_steps += 1
            if not (stop or due(outcomes.ahead)):
                continue  # queue the next step without waiting for this one
            for current, advanced, loss, finite in outcomes.read():
                if not finite:
                    # Without loss scaling the gradients are checked too: the loss may be
                    # finite. Raised before anything below saves, for any queued step.
                    raise NonFiniteLoss(
                        f"non-finite loss or gradients (loss {loss}) at step {current + 1}: "
                        f"stopped without saving; the last good checkpoint is "
                        f"{result['checkpoint'] or '(none)'}. Lower --learning_rate or add "
                        f"--warmup_steps.")
                # False when the loss-scale optimizer skipped the update.
                skipped(advanced, current, optimizer, result["checkpoint"])
            # Whether the last step reached a new step: nothing to log or save otherwise.
            # (No earlier queued step can have reached a step acted on: see Outcomes.)
            advanced = current > result["step"]
            result.update(step=current, loss=loss)
            if advanced and (current % run.log_every == 0 or current == optim.train_steps):
                seconds = time.perf_counter() - window_start
                images_per_s = window_steps * accum * config.data.batch_size / max(seconds, 1e-9)
                lr = float(optimizer.learning_rate)  # the schedule's value now
                progress.update(current, loss, lr, images_per_s, memory_peak())
                tf.summary.scalar("loss", loss, step=current)
                tf.summary.scalar("learning_rate", lr, step=current)
                tf.summary.scalar("images_per_second", images_per_s, step=current)
                if data_stats is not None:
                    # Counted as the pipeline reads ahead, so a little ahead of `current`.
                    for name, count in data_stats.as_dict().items():
                        tf.summary.scalar(f"data/{name}", count, step=current)
                if current % (run.log_every * 4) == 0:
                    # The last micro-batch's: the predictions are of it.
                    images, labels = (strategy.experimental_local_results(t)[0]
                                      for t in micro[-1])
                    summaries.write_samples(images, labels, predictions, source.palette, current,
                                            run.num_summary_images)
                window_start, window_steps = time.perf_counter(), 0
            if advanced and evaluate and current % run.eval_every == 0:
                eval_start = time.perf_counter()
                metrics = evaluate(current)
                log(f"step {current}: {config.data.eval_split} mIoU {metrics['miou']:.4f} "
                    f"(whole image, {metrics['images']} images, {metrics['seconds']:.1f} s)")
                # images/s counts training only: the window skips the evaluation.
                window_start += time.perf_counter() - eval_start
            if (advanced and (current % run.checkpoint_every == 0
                              or current == optim.train_steps)) or (stop and saved_at != current):
                result["checkpoint"], saved_at = ckpts.save(current), current
            if stop:
                result["stopped_by"] = stop.signal
                log(f"{stop.signal}: saved {result['checkpoint']} at step {current}; "
                    f"run again to resume")
                break
    writer.flush()
    if data_stats is not None and data_stats.summary(config.data.train_split):
        log(data_stats.summary(config.data.train_split))
    return result
