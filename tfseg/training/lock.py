"""One training run per model folder: an advisory lock on a file that names its holder."""

import errno
import fcntl
import os
import socket

from tfseg.errors import InputError

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
    so two starting runs cannot both win. The file stays (removing it would let a
    third run lock a fresh file while a second still holds the old one).

    On a file system without ``flock`` (some FUSE mounts) the run goes on unlocked,
    with a warning.
    """

    def __init__(self, model_dir, log=print):
        self.path = os.path.join(model_dir, LOCK_FILE)
        self.model_dir = model_dir
        self.log = log
        self.fd = None

    def __enter__(self):
        os.makedirs(self.model_dir, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = os.read(fd, 256).decode(errors="replace").split()
            os.close(fd)
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                self.log(f"warning: {self.path} cannot be locked ({error.strerror}); make "
                         f"sure no other run trains in {self.model_dir}")
                return self
            host, pid = holder if len(holder) == 2 else ("?", "?")
            where = "" if host == socket.gethostname() else f" on host {host}"
            raise InputError(f"--model_dir: {self.model_dir} is in use by another training "
                             f"run (pid {pid}{where}); stop it or choose another "
                             f"--model_dir") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{socket.gethostname()} {os.getpid()}\n".encode())
        self.fd = fd
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.ftruncate(self.fd, 0)  # no holder: a later refusal never names this process
            os.close(self.fd)  # releases the lock
            self.fd = None
        return False
