"""An output folder claimed by one process for its whole write: predict and export into
the same folder at once, the second is refused in one line (``claimed``), so that
neither replaces the other's files. No TensorFlow."""

import contextlib
import fcntl
import os

from tfseg.errors import InputError
from tfseg.io.folders import missing, remove_empty
from tfseg.io.outputs import require_folder, require_replaceable

CLAIM_PREFIX = ".tfseg-claim-"


@contextlib.contextmanager
def claimed(path, flag, overwrite, kind, belongs):
    """Holds the output folder ``path`` for this process while the block runs, then checks
    it as ``require_replaceable`` does: another tfseg process writing there (predict or
    export into the same ``--output_dir``) is refused in one line, so that neither
    replaces the other's files. The claim is an exclusive ``flock`` on a hidden file
    beside ``path``, which the kernel releases when the process ends, even by kill -9.

    Raises:
      InputError: naming ``flag``: another process holds ``path``, the claim cannot be
        written (a full or read-only disk: the folders it made are removed again), or
        ``require_replaceable``'s reasons.

    Example:
        with claimed(out, "--output_dir", False, "a predict batch", is_png):
            with replaced_folder(out, "--output_dir") as new:
                write_everything_into(new)
    """
    require_folder(path, flag)
    parent, name = os.path.split(os.path.abspath(path))
    made = missing(parent)
    lock = os.path.join(parent, CLAIM_PREFIX + name)
    try:
        os.makedirs(parent, exist_ok=True)
        handle = _lock(lock)
    except OSError as error:  # a full or read-only disk: nothing of this claim is left
        remove_empty(made)
        raise InputError(f"{flag}: could not write {path}: {error.strerror or error}") from None
    if isinstance(handle, str):
        raise InputError(f"{flag}: {path} is being written by another tfseg process "
                         f"({handle}); wait for it to end, or choose another folder")
    try:
        require_replaceable(path, flag, overwrite, kind, belongs)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.remove(lock)  # before the unlock: a waiting process then opens a new file
        os.close(handle)
        remove_empty(made)  # a write that failed leaves no folder of its own


def _lock(lock):
    """The descriptor of ``lock``, created if missing, locked exclusively by this process;
    or, where another holds it, a few words naming that process."""
    while True:
        handle = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(handle, 32).decode(errors="replace").strip()
            os.close(handle)
            return f"pid {holder}" if holder.isdigit() else "starting"
        try:
            current = os.stat(lock).st_ino == os.fstat(handle).st_ino
        except FileNotFoundError:
            current = False
        if current:  # not a file its last holder removed after this open
            try:
                os.ftruncate(handle, 0)
                os.write(handle, str(os.getpid()).encode())
            except OSError:
                with contextlib.suppress(OSError):
                    os.remove(lock)  # still locked: as ``claimed``'s own removal
                os.close(handle)
                raise
            return handle
        os.close(handle)
