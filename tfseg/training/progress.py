"""Training progress as plain lines: readable in a terminal, a log file or a CI console.

One line per ``--log_every`` steps, with units and no control characters (Keras'
``Progbar`` colours and rewrites its line, which leaves ANSI codes and backspaces in a
file)::

    step  250/1500  17%  loss 0.4127  lr 0.0421  38.2 img/s  rss_peak 1,034 MiB  eta 2:41

Example:
    progress = Progress(total=1500, start=0)
    progress.update(25, loss=1.234, lr=0.05, images_per_s=38.2, peak=("rss_peak_MiB", 1034))
"""

import resource
import sys
import time

import tensorflow as tf

from tfseg.runtime import device as device_lib
from tfseg.runtime import peak as peak_lib
from tfseg.units import MIB


def duration(seconds):
    """``h:mm:ss`` or ``m:ss``."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    """Writes one progress line per call of ``update``.

    Args:
      total: the run's last step (``--train_steps``).
      start: the step the run starts from (a resumed run's).
      out: where the lines go (default: ``sys.stdout`` when called).
    """

    def __init__(self, total, start=0, out=None):
        self.total, self.start = total, start
        self.out = out
        self.began = time.perf_counter()
        self.digits = len(str(total))

    def line(self, step, loss, lr, images_per_s, peak, now=None):
        """The text of one line. ``peak``: (label such as "rss_peak_MiB", MiB)."""
        elapsed = (now if now is not None else time.perf_counter()) - self.began
        done = step - self.start
        eta = elapsed / done * (self.total - step) if done > 0 else 0.0
        label, mib = peak
        return (f"step {step:>{self.digits}}/{self.total} {100 * step // self.total:3d}%  "
                f"loss {loss:.4f}  lr {lr:.3g}  {images_per_s:.1f} img/s  "
                f"{label.removesuffix('_MiB')} {mib:,.0f} MiB  "
                + (f"eta {duration(eta)}" if step < self.total else f"took {duration(elapsed)}"))

    def update(self, step, loss, lr, images_per_s, peak):
        print(self.line(step, loss, lr, images_per_s, peak), file=self.out or sys.stdout,
              flush=True)


def memory_peak():
    """(label, MiB): TF's allocator peak since the last call on the device measurements
    read (``tfseg.runtime.device.name()``: GPU:0, else CPU:0), where it
    measures one, else the process's peak resident set size so far, labelled as such.

    The CPU allocator keeps no statistics unless oneDNN is on (``get_memory_info``
    raises), and with oneDNN it counts no buffer under 256 KiB, so a small step's
    peak reads 0 or a fraction of a MiB: ``tfseg.runtime.peak.measured`` says when a
    reading is not the step's, and the resident size is shown instead.
    The resident size's high-water mark starts at the parent process's (Linux keeps
    it across fork and exec), so under a large parent it shows that until exceeded.
    """
    device = device_lib.name()
    try:
        peak = device_lib.memory_info()["peak"]
    except (ValueError, tf.errors.OpError):
        peak = None
    else:
        # Each reading is the peak since the one before (the last log line), not the run's.
        device_lib.reset_peak()
    if peak_lib.measured(peak, device) is not None:
        return f"{device[:3].lower()}_peak_MiB", peak / MIB
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return "rss_peak_MiB", rss / (MIB if sys.platform == "darwin" else 2**10)
