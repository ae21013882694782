"""The training loop: resume, step, log, evaluate, checkpoint; stop cleanly on signals or NaN."""

import os
import resource
import sys
import time

import keras
import numpy as np
import tensorflow as tf

from tfseg import data as data_lib
from tfseg.errors import InputError, NonFiniteLoss
from tfseg.train import builders, checkpoints, summaries
from tfseg.train.signals import StopRequest
from tfseg.train.step import PixelLoss, make_train_step

PEAK_LABELS = ("gpu_peak_MiB", "cpu_peak_MiB", "rss_peak_MiB")


def memory_peak():
    """(label, MiB): TF's allocator peak (GPU:0, else CPU:0) where it keeps one, else the
    process's peak resident set size, labelled as such.

    The CPU allocator keeps no statistics unless oneDNN is on: ``get_memory_info``
    then raises or reports 0, which the progress bar used to show as a peak of 0.
    The resident size's high-water mark starts at the parent process's (Linux keeps
    it across fork and exec), so under a large parent it shows that until exceeded.
    """
    device = "GPU:0" if tf.config.list_logical_devices("GPU") else "CPU:0"
    try:
        peak = tf.config.experimental.get_memory_info(device)["peak"]
    except (ValueError, tf.errors.OpError):
        peak = 0
    if peak > 0:
        return f"{device[:3].lower()}_peak_MiB", peak / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return "rss_peak_MiB", rss / (2**20 if sys.platform == "darwin" else 2**10)


def build(config, strategy):
    """Model, optimizer, step counter and checkpoints, restored from ``model_dir`` if it has one."""
    source = builders.source(config, training=True)
    if config.class_weights and len(config.class_weights) != source.num_classes:
        raise InputError(f"--class_weights: {len(config.class_weights)} values for "
                         f"{source.num_classes} classes of {config.dataset}")
    norm = builders.norm_for(config, strategy)
    with strategy.scope():
        model = builders.model(config, source.num_classes, norm)
        optimizer = builders.optimizer(config, model)
        step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    ckpts = checkpoints.Checkpoints(model, config.model_dir, strategy,
                                    config.keep_checkpoints, optimizer=optimizer, step=step)
    return source, model, optimizer, step, ckpts, norm


def periodic_eval(config, model, source, chief):
    """``evaluate(step)`` for ``--eval_every``, or None: off, or not the chief (which owns
    the TensorBoard files; inference needs no other worker)."""
    if not config.eval_every or not chief:
        return None
    from tfseg.evaluation.evaluate import PeriodicEval  # evaluation imports train.builders

    return PeriodicEval(config, model, source.class_names)


def train(config, log=print):
    """Trains until ``config.train_steps``, resuming from ``config.model_dir``.

    Returns:
      A dict: "step" reached, "loss" (last), "stopped_by" (None, "SIGTERM", "SIGINT"),
      "checkpoint" (the last saved path).

    Raises:
      NonFiniteLoss: the loss was NaN/Inf (nothing is saved after the last good step).
    """
    strategy = builders.strategy(config)
    if config.batch_size < strategy.num_replicas_in_sync:
        # A replica with an empty batch has no batch statistics: its norm gives NaN.
        raise InputError(f"--batch_size: {config.batch_size} is less than the "
                         f"{strategy.num_replicas_in_sync} replicas; give each at least one image")
    builders.set_dtype_policy(config)
    source, model, optimizer, step, ckpts, norm = build(config, strategy)
    restored = ckpts.restore()
    start = int(step.numpy())
    log(f"{model.name}: {model.count_params():,} parameters, {source.num_classes} classes, "
        f"{norm} norm, {strategy.num_replicas_in_sync} replica(s); "
        + (f"resumed from {restored} at step {start}" if restored else "from scratch"))
    if ckpts.chief:
        # Class names and palette too: predict and export then need no data set.
        checkpoints.save_config(config, config.model_dir, class_names=list(source.class_names),
                                palette=np.asarray(source.palette).tolist())
    if start >= config.train_steps:
        log(f"already trained to step {start} (--train_steps={config.train_steps})")
        return dict(step=start, loss=None, stopped_by=None, checkpoint=restored)

    # Outside the strategy's scope: the counters are this host's, not mirrored.
    dataset, data_stats = data_lib.build_dataset_with_stats(
        builders.data_config(config, training=True), training=True)
    batches = data_lib.iterate(data_lib.distribute(dataset.repeat(), strategy))
    train_step = make_train_step(strategy, model, optimizer, PixelLoss(config.class_weights),
                                 step, config.jit_compile,
                                 *builders.l2_weight_decay(config, model))
    evaluate = periodic_eval(config, model, source, ckpts.chief)
    writer = (tf.summary.create_file_writer(os.path.join(config.model_dir, "train"))
              if ckpts.chief else tf.summary.create_noop_writer())
    progbar = keras.utils.Progbar(config.train_steps - start, interval=0.0,
                                  stateful_metrics=["lr", "img/s", *PEAK_LABELS])
    result = dict(step=start, loss=None, stopped_by=None, checkpoint=restored)
    window_start, window_steps = time.perf_counter(), 0
    saved_at = start if restored else None  # the step whose checkpoint is on disk

    with StopRequest() as stop, writer.as_default():
        while int(step.numpy()) < config.train_steps:
            batch = next(batches)
            loss, finite, predictions = train_step(batch)
            current, loss = int(step.numpy()), float(loss)
            if not bool(finite):
                # Without loss scaling the gradients are checked too: the loss may be finite.
                raise NonFiniteLoss(
                    f"non-finite loss or gradients (loss {loss}) at step {current + 1}: stopped "
                    f"without saving; the last good "
                    f"checkpoint is {ckpts.latest or '(none)'}. Lower --learning_rate or add "
                    f"--warmup_steps.")
            # False when the loss-scale optimizer skipped the update: nothing to log or save.
            advanced = current > result["step"]
            window_steps += 1
            result.update(step=current, loss=loss)
            if advanced and (current % config.log_every == 0 or current == config.train_steps):
                seconds = time.perf_counter() - window_start
                images_per_s = window_steps * config.batch_size / max(seconds, 1e-9)
                lr = float(optimizer.learning_rate)  # the schedule's value now
                peak_label, peak = memory_peak()
                progbar.update(current - start, [
                    ("loss", loss), ("lr", float(f"{lr:.3g}")),
                    ("img/s", round(images_per_s, 1)), (peak_label, round(peak))])
                tf.summary.scalar("loss", loss, step=current)
                tf.summary.scalar("learning_rate", lr, step=current)
                tf.summary.scalar("images_per_second", images_per_s, step=current)
                if data_stats is not None:
                    # Counted as the pipeline reads ahead, so a little ahead of `current`.
                    for name, count in data_stats.as_dict().items():
                        tf.summary.scalar(f"data/{name}", count, step=current)
                if current % (config.log_every * 4) == 0:
                    images, labels = (strategy.experimental_local_results(t)[0] for t in batch)
                    summaries.write_samples(images, labels, predictions, source.palette, current,
                                            config.num_summary_images)
                window_start, window_steps = time.perf_counter(), 0
            if advanced and evaluate and current % config.eval_every == 0:
                eval_start = time.perf_counter()
                metrics = evaluate(current)
                log(f"\nstep {current}: {config.eval_split} mIoU {metrics['miou']:.4f} "
                    f"(whole image, {metrics['images']} images, {metrics['seconds']:.1f} s)")
                # images/s counts training only: the window skips the evaluation.
                window_start += time.perf_counter() - eval_start
            if (advanced and (current % config.checkpoint_every == 0
                              or current == config.train_steps)) or (stop and saved_at != current):
                result["checkpoint"], saved_at = ckpts.save(current), current
            if stop:
                result["stopped_by"] = stop.signal
                log(f"\n{stop.signal}: saved {result['checkpoint']} at step {current}; "
                    f"run again to resume")
                break
    writer.flush()
    if data_stats is not None:
        log(data_stats.summary())
    return result
