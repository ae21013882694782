"""A checkpoint held still while a reader reads it, whatever a training run rotates.

A training run's ``CheckpointManager`` deletes its oldest checkpoint after each save. A
reader (eval, predict, export on a folder being trained) that found a checkpoint a moment
before could lose its files half-way through a restore, and a restore that fails half-way
leaves TensorFlow's restore state pointing at the vanished files, so that even the next
restore fails. Hard links pin the files instead: the reader restores from its own links,
which a deletion of the originals does not touch, and takes them away when done.
"""

import contextlib
import glob
import os
import shutil
import tempfile

from tfseg.runtime.state import VanishedCheckpoint


_PREFIX = ".reading-"


@contextlib.contextmanager
def pinned(path):
    """Yields a checkpoint prefix with the contents of the checkpoint ``path`` that stays
    readable until the block ends.

    The files of ``path`` (``.index`` and ``.data-*``) are hard-linked into a private
    folder beside them; where links cannot be made (a read-only folder, a file system
    without hard links) ``path`` itself is yielded: no training run rotates there.

    Raises:
      VanishedCheckpoint: a file of ``path`` was removed before it was linked.

    Example:
        with pinned("runs/synthetic/ckpt-6") as prefix:
            tf.train.Checkpoint(model=model).restore(prefix).expect_partial()
    """
    folder, name = os.path.split(os.path.abspath(path))
    names = [os.path.basename(f) for f in glob.glob(glob.escape(path) + ".*")]
    if not any(n == name + ".index" for n in names):
        raise VanishedCheckpoint(path)
    _remove_stale(folder)
    try:
        private = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=folder)
    except OSError:
        yield path
        return
    try:
        for entry in names:
            try:
                os.link(os.path.join(folder, entry), os.path.join(private, entry))
            except FileNotFoundError:
                raise VanishedCheckpoint(path) from None
            except OSError:  # no hard links here: read in place, as before
                shutil.rmtree(private, ignore_errors=True)
                private = None
                break
        yield os.path.join(private, name) if private else path
    finally:
        if private:
            shutil.rmtree(private, ignore_errors=True)


def _remove_stale(folder):
    """Removes the pin folders of readers that were killed (their pid is gone), which
    would otherwise keep the disk space of rotated checkpoints."""
    for entry in glob.glob(os.path.join(glob.escape(folder), _PREFIX + "*")):
        pid = os.path.basename(entry)[len(_PREFIX):].split("-")[0]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}") and os.path.exists("/proc"):
            shutil.rmtree(entry, ignore_errors=True)
