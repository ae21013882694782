"""The step loop of a prepared training run (``tfseg.training.loop``): steps queued without
waiting for the device, and at the steps where it acts their results read, then log,
evaluate, save and stop.

The loop reads the steps' results (loss, finite check, step counter) only where it acts:
at log, eval and checkpoint steps, on a stop and at the end (``tfseg.training.outcomes``);
in between the host queues the next step without waiting for the device."""

import os
import time

import tensorflow as tf

from tfseg import data as data_lib
from tfseg.errors import InputError, NonFiniteLoss
from tfseg.evaluation.evaluate import PeriodicEval
from tfseg.runtime import checkpoints, summaries
from tfseg.training.outcomes import Outcomes, SkippedUpdates
from tfseg.training.progress import Progress, memory_peak


def periodic_eval(run):
    """``evaluate(step)`` for ``--eval_every`` of ``run`` (a ``TrainingRun``), or None: off,
    or not the chief (which owns the TensorBoard files; inference needs no other worker)."""
    if not run.config.run.eval_every or not run.ckpts.chief:
        return None
    return PeriodicEval(run.model, run.source.class_names, run.eval_data, run.inference,
                        run.config.run.model_dir)


class Stepper:
    """Steps a prepared ``tfseg.training.assembly.TrainingRun`` to ``--train_steps`` or a stop.

    Args:
      run: the ``TrainingRun``, restored.
      stop: the ``StopRequest`` (truthy once a signal came).
      log: called with each line.
      result: the dict ``train`` returns ("step", "loss", "stopped_by", "checkpoint"),
        updated as the run goes and returned by ``run()``.
    """

    def __init__(self, run, stop, log, result):
        self.config, self.strategy, self.training, self.stop, self.log = (
            run.config, run.strategy, run, stop, log)
        self.result = result
        settings = run.config.run
        start = self.start = result["step"]
        # The input goes on where the checkpoint's left it. Outside the strategy's scope:
        # the pipeline's counters are this host's, not mirrored.
        dataset, self.data_stats = data_lib.build_dataset_with_stats(
            run.data, training=True, start_batch=int(run.read.numpy()))
        self.batches = data_lib.iterate(data_lib.distribute(dataset, run.strategy),
                                        run.data.skip_bad_examples)
        self.progress = Progress(run.config.optim.train_steps, start)
        self.skipped = SkippedUpdates(settings.max_skipped_updates, log)
        self.outcomes = Outcomes(start)  # the steps' results, read only where the loop acts
        self.saved_at = start if result["checkpoint"] else None  # the step saved on disk
        self.evaluate = periodic_eval(run)
        self.writer = (tf.summary.create_file_writer(os.path.join(settings.model_dir, "train"))
                       if run.ckpts.chief else tf.summary.create_noop_writer())
        self.window_start, self.window_steps = time.perf_counter(), 0

    def due(self, at):
        """Whether the loop acts at step ``at``: logs, evaluates, saves or ends."""
        run, steps = self.config.run, self.config.optim.train_steps
        return (at % run.log_every == 0 or at % run.checkpoint_every == 0 or at >= steps
                or bool(self.evaluate and at % run.eval_every == 0))

    def run(self):
        accum = self.config.optim.grad_accum_steps
        with self.writer.as_default():
            while self.outcomes.ahead < self.config.optim.train_steps:
                # --grad_accum_steps: one update of `accum` micro-batches, all counted read.
                try:
                    micro = [next(self.batches) for _ in range(accum)]
                except InputError as error:
                    raise self.saved_before(error) from None
                loss, finite, predictions = self.training.train_step(
                    micro[0] if accum == 1 else micro)
                self.training.read.assign_add(accum)
                self.outcomes.add(loss, finite, self.training.step.read_value())
                self.window_steps += 1
                if not (self.stop or self.due(self.outcomes.ahead)):
                    continue  # queue the next step without waiting for this one
                if self.act(micro, predictions):
                    break
        self.writer.flush()
        split = self.config.data.train_split
        if self.data_stats is not None and self.data_stats.summary(split):
            self.log(self.data_stats.summary(split))
        return self.result

    def saved_before(self, error):
        """``error``, a file the training or evaluation data could not read, once the steps
        before it are saved: such a file can come up hours into a run, and the user fixes or skips
        it and resumes from the step it stopped. Not on several workers, where the save
        would wait for workers that go on stepping."""
        if not checkpoints.one_worker(self.strategy):
            return error
        current = self.read_outcomes()[0] if self.outcomes.queued else self.result["step"]
        if current in (self.saved_at, self.start):
            return error
        self.result.update(step=current, checkpoint=self.training.ckpts.save(current))
        self.saved_at = current
        return InputError(f"{error}; saved {self.result['checkpoint']} at step {current}: "
                          f"run again to resume")

    def read_outcomes(self):
        """(step, loss) of the last queued step, once every queued step's results are read;
        ``NonFiniteLoss`` for any that is not finite."""
        for current, advanced, loss, finite in self.outcomes.read():
            if not finite:
                # Without loss scaling the gradients are checked too: the loss may be
                # finite. Raised before anything below saves, for any queued step.
                raise NonFiniteLoss(
                    f"non-finite loss or gradients (loss {loss}) at step {current + 1}: "
                    f"stopped without saving; the last good checkpoint is "
                    f"{self.result['checkpoint'] or '(none)'}. Lower --learning_rate or add "
                    f"--warmup_steps.")
            # False when the loss-scale optimizer skipped the update.
            self.skipped(advanced, current, self.training.optimizer, self.result["checkpoint"])
        return current, loss

    def act(self, micro, predictions):
        """Reads the queued steps' results and acts on the last; True: stop the loop."""
        current, loss = self.read_outcomes()
        # Whether the last step reached a new step: nothing to log or save otherwise.
        # (No earlier queued step can have reached a step acted on: see Outcomes.)
        advanced = current > self.result["step"]
        self.result.update(step=current, loss=loss)
        settings, steps = self.config.run, self.config.optim.train_steps
        if advanced and (current % settings.log_every == 0 or current == steps):
            self.log_step(current, loss, micro, predictions)
        if advanced and self.evaluate and current % settings.eval_every == 0:
            eval_start = time.perf_counter()
            try:
                metrics = self.evaluate(current)
            except InputError as error:  # a bad evaluation file: the step is saved first
                raise self.saved_before(error) from None
            self.log(f"step {current}: {self.config.data.eval_split} mIoU "
                     f"{metrics['miou']:.4f} (whole image, {metrics['images']} images, "
                     f"{metrics['seconds']:.1f} s)")
            # images/s counts training only: the window skips the evaluation.
            self.window_start += time.perf_counter() - eval_start
        if (advanced and (current % settings.checkpoint_every == 0 or current == steps)) or (
                self.stop and self.saved_at != current):
            self.result["checkpoint"] = self.training.ckpts.save(current)
            self.saved_at = current
        if self.stop:
            self.result["stopped_by"] = self.stop.signal
            self.log(f"{self.stop.signal}: saved {self.result['checkpoint']} at step "
                     f"{current}; run again to resume")
        return bool(self.stop)

    def log_step(self, current, loss, micro, predictions):
        """The progress line and TensorBoard's scalars (and, every 4th log, sample images)."""
        settings, batch = self.config.run, self.config.data.batch_size
        seconds = time.perf_counter() - self.window_start
        images = self.window_steps * self.config.optim.grad_accum_steps * batch
        images_per_s = images / max(seconds, 1e-9)
        lr = float(self.training.optimizer.learning_rate)  # the schedule's value now
        self.progress.update(current, loss, lr, images_per_s, memory_peak())
        tf.summary.scalar("loss", loss, step=current)
        tf.summary.scalar("learning_rate", lr, step=current)
        tf.summary.scalar("images_per_second", images_per_s, step=current)
        if self.data_stats is not None:
            # Counted as the pipeline reads ahead, so a little ahead of `current`.
            for name, count in self.data_stats.as_dict().items():
                tf.summary.scalar(f"data/{name}", count, step=current)
        if current % (settings.log_every * 4) == 0:
            # The last micro-batch's: the predictions are of it.
            images, labels = (self.strategy.experimental_local_results(t)[0]
                              for t in micro[-1])
            summaries.write_samples(images, labels, predictions, self.training.source.palette,
                                    current, settings.num_summary_images)
        self.window_start, self.window_steps = time.perf_counter(), 0
