"""The training loop: resume, step, log, checkpoint, and stop cleanly on signals or NaN."""

import os
import time

import keras
import tensorflow as tf

from tfseg import data as data_lib
from tfseg.train import builders, checkpoints, summaries, tensorboard
from tfseg.train.signals import StopRequest
from tfseg.train.step import PixelLoss, make_train_step


class NonFiniteLoss(RuntimeError):
    """The loss became NaN or Inf; the last good checkpoint is kept, the bad state is not saved."""


def memory_peak_mb():
    """Peak allocator bytes (GPU:0, else CPU:0) in MiB, or None where TF does not track it."""
    device = "GPU:0" if tf.config.list_logical_devices("GPU") else "CPU:0"
    try:
        return tf.config.experimental.get_memory_info(device)["peak"] / 2**20
    except (ValueError, tf.errors.OpError):
        return None


def build(config, strategy):
    """Model, optimizer, step counter and checkpoints, restored from ``model_dir`` if it has one."""
    source = builders.source(config, training=True)
    if config.class_weights and len(config.class_weights) != source.num_classes:
        raise ValueError(f"--class_weights: {len(config.class_weights)} values for "
                         f"{source.num_classes} classes of {config.dataset}")
    with strategy.scope():
        model = builders.model(config, source.num_classes, builders.norm_for(config, strategy))
        optimizer = builders.optimizer(config, model)
        step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    ckpts = checkpoints.Checkpoints(model, config.model_dir, strategy,
                                    config.keep_checkpoints, optimizer=optimizer, step=step)
    return source, model, optimizer, step, ckpts


def train(config, log=print):
    """Trains until ``config.train_steps``, resuming from ``config.model_dir``.

    Returns:
      A dict: "step" reached, "loss" (last), "stopped_by" (None, "SIGTERM", "SIGINT"),
      "checkpoint" (the last saved path).

    Raises:
      NonFiniteLoss: the loss was NaN/Inf (nothing is saved after the last good step).
    """
    strategy = builders.strategy(config)
    builders.set_dtype_policy(config)
    source, model, optimizer, step, ckpts = build(config, strategy)
    restored = ckpts.restore()
    start = int(step.numpy())
    log(f"{model.name}: {model.count_params():,} parameters, {source.num_classes} classes, "
        f"{strategy.num_replicas_in_sync} replica(s); "
        + (f"resumed from {restored} at step {start}" if restored else "from scratch"))
    if ckpts.chief:
        checkpoints.save_config(config, config.model_dir)
    if start >= config.train_steps:
        log(f"already trained to step {start} (--train_steps={config.train_steps})")
        return dict(step=start, loss=None, stopped_by=None, checkpoint=restored)

    dataset = data_lib.build_dataset(builders.data_config(config, training=True), training=True)
    batches = iter(data_lib.distribute(dataset.repeat(), strategy))
    train_step = make_train_step(strategy, model, optimizer, PixelLoss(config.class_weights),
                                 step, config.jit_compile)
    writer = (tf.summary.create_file_writer(os.path.join(config.model_dir, "train"))
              if ckpts.chief else tf.summary.create_noop_writer())
    progbar = keras.utils.Progbar(config.train_steps - start, interval=0.0,
                                  stateful_metrics=["lr", "img/s", "peak_MiB"])
    result = dict(step=start, loss=None, stopped_by=None, checkpoint=restored)
    window_start, window_steps = time.perf_counter(), 0

    with StopRequest() as stop, writer.as_default():
        while int(step.numpy()) < config.train_steps:
            batch = next(batches)
            loss, finite, predictions = train_step(batch)
            current, loss = int(step.numpy()), float(loss)
            if not bool(finite):
                raise NonFiniteLoss(
                    f"loss is {loss} at step {current + 1}: stopped without saving; the last good "
                    f"checkpoint is {ckpts.latest or '(none)'}. Lower --learning_rate or add "
                    f"--warmup_steps.")
            window_steps += 1
            result.update(step=current, loss=loss)
            if current % config.log_every == 0 or current == config.train_steps:
                seconds = time.perf_counter() - window_start
                images_per_s = window_steps * config.batch_size / max(seconds, 1e-9)
                lr = float(optimizer.learning_rate)  # the schedule's value now
                peak = memory_peak_mb()
                progbar.update(current - start, [
                    ("loss", loss), ("lr", float(f"{lr:.3g}")),
                    ("img/s", round(images_per_s, 1)), ("peak_MiB", round(peak or 0.0))])
                tensorboard.scalar("loss", loss, step=current)
                tensorboard.scalar("learning_rate", lr, step=current)
                tensorboard.scalar("images_per_second", images_per_s, step=current)
                if current % (config.log_every * 4) == 0:
                    images, labels = (strategy.experimental_local_results(t)[0] for t in batch)
                    summaries.write_samples(images, labels, predictions, source.palette, current,
                                            config.num_summary_images)
                window_start, window_steps = time.perf_counter(), 0
            if current % config.checkpoint_every == 0 or current == config.train_steps or stop:
                result["checkpoint"] = ckpts.save(current)
            if stop:
                result["stopped_by"] = stop.signal
                log(f"\n{stop.signal}: saved {result['checkpoint']} at step {current}; "
                    f"run again to resume")
                break
    writer.flush()
    return result
