"""The training steps' results, read from the device only when the loop needs them.

Reading a value on the host (``float(loss)``, ``step.numpy()``) waits for the device to
finish everything queued so far: read every step, the host and the device take turns,
and the device idles while the host fetches the next batch and queues the next step.
The loop instead keeps each step's scalars as tensors and reads them all at once where
it must know them: at log, evaluation and checkpoint steps, on a stop and at the end.
In between, the host queues steps without waiting (where the step itself needs a value
on the host, its non-finite check's ``tf.cond``, TF waits inside the call).

Which steps those are is decided without reading: each step moves the step counter by
at most one (0 where the loss-scale optimizer skipped the update, or the gradients were
not finite), so ``ahead``, the counter as of the last read plus the steps queued since,
is never below the device's counter, and reaches each step number no later than the
counter does. The loop reads when ``ahead`` is a step it acts on; where updates were
skipped the counter is behind, the read says so, and ``ahead`` restarts from it.

Example:
    outcomes = Outcomes(start=0)
    loss, finite, _ = train_step(batch)
    outcomes.add(loss, finite, step.read_value())      # nothing read yet
    for step_after, advanced, loss, finite in outcomes.read():  # one wait, all queued steps
        ...
"""

import numpy as np
import tensorflow as tf

from tfseg.errors import NonFiniteLoss


class Outcomes:
    """The queued steps' (loss, finite, step counter after) tensors, read in one go.

    Args:
      start: the step counter's value before the first queued step.
    """

    def __init__(self, start):
        self.known = int(start)  # the counter as of the last read
        self._queued = []

    def add(self, loss, finite, step_after):
        """Keeps a queued step's loss, finite flag and step counter (scalar tensors)."""
        self._queued.append((loss, finite, step_after))

    @property
    def ahead(self):
        """The counter if every queued step applied its update: never below the device's."""
        return self.known + len(self._queued)

    @property
    def queued(self):
        return len(self._queued)

    def read(self):
        """[(step counter after, advanced, loss, finite)] of each queued step in order, as
        Python numbers, read with one wait; the queue is emptied."""
        if not self._queued:
            return []
        losses, finite, steps = (np.asarray(tf.stack([tf.cast(entry[k], dtype)
                                                      for entry in self._queued]))
                                 for k, dtype in ((0, tf.float32), (1, tf.bool), (2, tf.int64)))
        out, before = [], self.known
        for loss, ok, after in zip(losses.tolist(), finite.tolist(), steps.tolist()):
            out.append((after, after > before, loss, ok))
            before = after
        self.known, self._queued = before, []
        return out


class SkippedUpdates:
    """Counts updates in a row that the loss-scale optimizer skipped (``mixed_float16``:
    non-finite gradients), logs them, and stops the run after ``limit``.

    A skipped update does not advance the step, and logging and saving happen only
    on an advance: gradients that stay non-finite would loop forever in silence.
    """

    def __init__(self, limit, log=print):
        self.limit = limit
        self.log = log
        self.count = 0

    def __call__(self, advanced, step, optimizer, last_checkpoint):
        """Call after each step: ``advanced`` is whether it applied its update."""
        if advanced:
            self.count = 0
            return
        self.count += 1
        scale = float(getattr(optimizer, "dynamic_scale", float("nan")))
        if self.count == 1 or self.count % 10 == 0:
            self.log(f"step {step + 1}: update skipped, non-finite gradients "
                     f"({self.count} in a row; loss scale now {scale:g})")
        if self.count >= self.limit:
            raise NonFiniteLoss(
                f"{self.count} updates in a row skipped for non-finite gradients at step "
                f"{step + 1} (--max_skipped_updates={self.limit}): stopped; the last good "
                f"checkpoint is {last_checkpoint or '(none)'}. Lower --learning_rate or use "
                f"--dtype_policy=float32 or mixed_bfloat16.")
