"""One training run per model folder: a lock file that names its holder."""

import os
import socket

from tfseg.errors import InputError

LOCK_FILE = ".lock"


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


class ModelDirLock:
    """An exclusive claim on ``model_dir`` for one training run, held as a context.

    Two trainers writing one folder would interleave their checkpoints. The lock
    is ``MODEL_DIR/.lock``, created atomically and holding "HOST PID". A
    second run on the same host is refused (``InputError``, naming the folder and
    the holder's pid) while that pid is alive; a lock left by a killed run is
    taken over, so a ``kill -9`` never blocks the resume. A lock held from another
    host cannot be checked and is refused, with the file to delete if that run is gone.
    (A reused pid looks alive: delete the file by hand in that rare case.)
    """

    def __init__(self, model_dir, log=print):
        self.path = os.path.join(model_dir, LOCK_FILE)
        self.model_dir = model_dir
        self.log = log
        self.held = False

    def _holder(self):
        """(host, pid) in the lock file, or None when it is unreadable."""
        try:
            with open(self.path) as f:
                host, pid = f.read().split()
            return host, int(pid)
        except (OSError, ValueError):
            return None

    def __enter__(self):
        os.makedirs(self.model_dir, exist_ok=True)
        me = socket.gethostname()
        for _ in range(3):
            # Written under a private name, then hard-linked into place: the link fails
            # if the lock exists, and a lock that exists is never half written.
            mine = f"{self.path}.{me}.{os.getpid()}"
            with open(mine, "w") as f:
                f.write(f"{me} {os.getpid()}\n")
            try:
                os.link(mine, self.path)
            except FileExistsError:
                holder = self._holder()
                if holder and holder[0] == me and _alive(holder[1]):
                    raise InputError(f"--model_dir: {self.model_dir} is in use by another "
                                     f"training run (pid {holder[1]}); stop it or choose "
                                     f"another --model_dir") from None
                if holder and holder[0] != me:
                    raise InputError(f"--model_dir: {self.model_dir} is locked by pid "
                                     f"{holder[1]} on host {holder[0]}; if that run has "
                                     f"ended, delete {self.path}") from None
                self.log(f"taking over the lock of an ended run in {self.model_dir} "
                         f"({'pid %d' % holder[1] if holder else 'unreadable lock'})")
                try:
                    os.remove(self.path)
                except FileNotFoundError:
                    pass  # another starting run removed it first; the link decides on the next try
                continue
            finally:
                if os.path.exists(mine):
                    os.remove(mine)
            self.held = True
            return self
        raise InputError(f"--model_dir: could not lock {self.model_dir}: another run keeps "
                         f"taking it")

    def __exit__(self, *exc):
        if self.held and self._holder() == (socket.gethostname(), os.getpid()):
            os.remove(self.path)
        self.held = False
        return False
