"""One training run per model folder: an advisory lock on a file that names its holder."""

import contextlib
import errno
import fcntl
import os
import socket

from tfseg.errors import InputError
from tfseg.io.folders import missing, remove_empty

LOCK_FILE = ".lock"


class ModelDirLock:
    """An exclusive claim on ``model_dir`` for one training run, held as a context.

    Two trainers writing one folder would interleave their checkpoints. The claim
    is an exclusive ``flock`` on ``MODEL_DIR/.lock``, and the file holds "HOST PID"
    of the holder for the refusal's message. A second run is refused
    (``InputError``, naming the folder and the holder) while the first holds it.
    The kernel drops the lock when its process ends, however it ends: a ``kill -9``
    never blocks the resume, and a new process that happens to get the dead one's
    pid (a restarted container) is not mistaken for it. Nothing is ever taken over,
    so two starting runs cannot both win.

    The file stays after a run that ends well (emptied). A run that ends in an
    exception (a refusal: a missing data set, a full disk) removes the file if it
    made it, and ``model_dir`` and the folders above it that it made if they are
    empty: a refused run leaves nothing behind. The file is removed while still
    locked, and a run that locked a file no longer at the path (removed meanwhile)
    opens the new one, so two runs never hold two files at once.

    A folder where the file cannot be written (full, read-only) is an ``InputError``
    naming --model_dir. On a file system without ``flock`` (some FUSE mounts) the run
    goes on unlocked, with a warning.
    """

    def __init__(self, model_dir, log=print):
        self.path = os.path.join(model_dir, LOCK_FILE)
        self.model_dir = model_dir
        self.log = log
        self.fd = None
        self.made, self.created = [], False

    def __enter__(self):
        self.made = missing(self.model_dir)
        try:
            os.makedirs(self.model_dir, exist_ok=True)
            self.fd = self._locked()
            if self.fd is not None:
                os.ftruncate(self.fd, 0)
                os.write(self.fd, f"{socket.gethostname()} {os.getpid()}\n".encode())
        except OSError as error:
            self._release(failed=True)
            raise InputError(f"--model_dir: could not write {self.model_dir}: "
                             f"{error.strerror or error}") from None
        return self

    def _locked(self):
        """The file's descriptor, locked by this process; None where the file system
        cannot lock (said). Raises ``InputError`` naming the holder of the lock."""
        while True:
            self.created = not os.path.lexists(self.path)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                holder = os.read(fd, 256).decode(errors="replace").split()
                os.close(fd)
                if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    self.log(f"warning: {self.path} cannot be locked ({error.strerror}); "
                             f"make sure no other run trains in {self.model_dir}")
                    return None
                host, pid = holder if len(holder) == 2 else ("?", "?")
                where = "" if host == socket.gethostname() else f" on host {host}"
                raise InputError(f"--model_dir: {self.model_dir} is in use by another "
                                 f"training run (pid {pid}{where}); stop it or choose "
                                 f"another --model_dir") from None
            try:
                current = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                current = False
            if current:  # not a file that a failed run removed after this open
                return fd
            os.close(fd)

    def _release(self, failed):
        """Unlocks; after a failure, first removes the file and the folders this run made."""
        removed = failed and self.created
        if removed:
            with contextlib.suppress(OSError):
                os.remove(self.path)  # before the unlock: see _locked
        if self.fd is not None:
            if not removed:
                os.ftruncate(self.fd, 0)  # no holder: a later refusal never names this process
            os.close(self.fd)  # releases the lock
            self.fd = None
        if failed:
            remove_empty(self.made)

    def __exit__(self, exc_type, *exc):
        self._release(failed=exc_type is not None)
        return False
