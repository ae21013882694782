"""Outputs written whole, by every mode that writes files: each is built under a hidden
staging folder in the folder it goes to, then renamed into place. A reader, or the next
run, sees the old output or the new, never a mix or a torn file.

Here, below every package that writes (``tfseg.data`` writes TFRecords), with no
TensorFlow. ``staged`` is the one mechanism: ``replaced_file`` and ``replaced_folder``
are its two common uses; ``require_*`` check a flag's folder before a mode works.

Signals: a SIGTERM or SIGINT that would end the process at once ends the write instead
(``tfseg.io.interrupts``): what was built is removed, or the renames finish first, and
then the signal takes its usual course. A kill -9 can leave a staging folder behind
(``.tfseg-staging-PID-*``): the next write into that folder removes it, and puts back an
entry that the kill caught between two renames.

Example:
    with replaced_folder("runs/x/export") as new:   # an empty folder beside the old one
        write_everything_into(new)                  # swapped in as a whole at the end
"""

import contextlib
import os
import shutil
import signal
import tempfile

from tfseg.errors import InputError
from tfseg.io.interrupts import Interrupted, SignalGuard

STAGING_PREFIX = ".tfseg-staging-"
_NEW, _OLD = "new", "old"
_ACTIVE = set()  # this process's staging folders in use (a pid can outlive a container)


def _alive(pid):
    if pid == os.getpid():
        return False  # ours, but not in _ACTIVE: a previous life of this pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


def clean_stale(folder):
    """Removes the staging folders in ``folder`` of processes that are gone (a kill -9
    during a write); an entry that such a kill left renamed away is put back first."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        root = os.path.join(folder, name)
        if not name.startswith(STAGING_PREFIX) or root in _ACTIVE:
            continue
        pid = name[len(STAGING_PREFIX):].split("-")[0]
        if pid.isdigit() and _alive(int(pid)):
            continue
        old = os.path.join(root, _OLD)
        with contextlib.suppress(OSError):  # (another process cleaning it at once)
            for entry in os.listdir(old) if os.path.isdir(old) else ():
                if not os.path.lexists(os.path.join(folder, entry)):
                    os.rename(os.path.join(old, entry), os.path.join(folder, entry))
            _remove(root)


class Stage:
    """An empty folder (``dir``) whose entries, when the write ends, replace those of the
    same names in ``folder``, one rename each."""

    def __init__(self, folder, last=()):
        self.folder = folder
        self.last = tuple(last)
        self._removed = []
        self.created = not os.path.isdir(folder)
        os.makedirs(folder, exist_ok=True)
        clean_stale(folder)
        self.root = tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=folder)
        _ACTIVE.add(self.root)
        self.dir = os.path.join(self.root, _NEW)
        os.mkdir(self.dir)
        os.mkdir(os.path.join(self.root, _OLD))

    def path(self, name):
        """Where to build ``folder/name``."""
        return os.path.join(self.dir, name)

    def remove(self, *names):
        """Entries of ``folder`` to remove with the commit (what the new output has not)."""
        self._removed += names

    def commit(self):
        """Renames every built entry into place (those of ``last`` last); a folder, or an
        entry whose kind changes, is first renamed away: a folder cannot be replaced."""
        names = sorted(os.listdir(self.dir),
                       key=lambda n: (self.last.index(n) + 1 if n in self.last else 0, n))
        old = os.path.join(self.root, _OLD)
        try:
            for name in names:
                new, target = os.path.join(self.dir, name), os.path.join(self.folder, name)
                if os.path.lexists(target) and (os.path.isdir(target) or os.path.isdir(new)):
                    os.rename(target, os.path.join(old, name))
                os.replace(new, target)
            for name in self._removed:
                if name not in names and os.path.lexists(os.path.join(self.folder, name)):
                    os.rename(os.path.join(self.folder, name), os.path.join(old, name))
        except OSError:
            # What was renamed away goes back where nothing took its place (``close``
            # would delete it with the staging folder).
            for name in os.listdir(old):
                if not os.path.lexists(os.path.join(self.folder, name)):
                    os.rename(os.path.join(old, name), os.path.join(self.folder, name))
            raise

    def close(self):
        _remove(self.root)
        _ACTIVE.discard(self.root)
        if self.created:
            with contextlib.suppress(OSError):  # a folder this write made, left empty
                os.rmdir(self.folder)


@contextlib.contextmanager
def staged(folder, last=()):
    """Yields a ``Stage`` for ``folder`` (created if missing): build the outputs in
    ``stage.dir`` under their final names; when the block ends, they replace those of
    ``folder``, names in ``last`` last. On an exception or a signal nothing in
    ``folder`` changes (see the module on signals)."""
    with SignalGuard() as guard:
        guard.hold = True  # (a signal now would leave a staging folder that none removes)
        stage = Stage(folder, last)
        guard.hold = False
        try:
            if guard.signum is not None:
                raise Interrupted(signal.Signals(guard.signum).name)
            yield stage
            guard.hold = True
            if guard.signum is None:  # (a signal whose exception code in between swallowed)
                stage.commit()
        finally:
            guard.hold = True
            stage.close()


@contextlib.contextmanager
def replaced_file(path):
    """Yields a path to write the new ``path`` to; renamed onto it at the end."""
    with staged(os.path.dirname(path) or ".") as stage:
        yield stage.path(os.path.basename(path))


@contextlib.contextmanager
def replaced_folder(path, flag=None):
    """Yields a new empty folder beside ``path``, which replaces it as a whole at the end.
    With ``flag``, an ``OSError`` is an ``InputError`` naming it and ``path``."""
    try:
        with staged(os.path.dirname(os.path.abspath(path))) as stage:
            new = stage.path(os.path.basename(os.path.abspath(path)))
            os.mkdir(new)
            yield new
    except OSError as error:
        if flag is None:
            raise
        raise InputError(f"{flag}: could not write {path}: {error.strerror or error}") from None


def require_folder(path, flag):
    """Raises ``InputError`` naming ``flag`` when ``path`` or a folder above it is a file."""
    above = os.path.abspath(path)
    while not os.path.lexists(above) and os.path.dirname(above) != above:
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        what = "" if above == os.path.abspath(path) else f" (in the way of {path})"
        raise InputError(f"{flag}: {above} is a file, not a folder{what}")


def require_writable(path, flag):
    """Raises ``InputError`` naming ``flag`` unless files can be written in ``path`` (or,
    where it does not exist yet, in the nearest folder above it, where it will be made):
    a file is made there and removed. For a mode that works for minutes before it
    writes (a report), so that nothing measured is thrown away at the end."""
    require_folder(path, flag)
    above = os.path.abspath(path)
    while not os.path.isdir(above) and os.path.dirname(above) != above:
        above = os.path.dirname(above)
    try:
        # Not STAGING_PREFIX: another process's clean-up would take it for a leftover.
        handle, probe = tempfile.mkstemp(prefix=f".tfseg-probe-{os.getpid()}-", dir=above)
        os.close(handle)
        os.remove(probe)
    except OSError as error:
        raise InputError(f"{flag}: cannot write in {above}: "
                         f"{error.strerror or error}") from None


def require_replaceable(path, flag, overwrite, kind, belongs):
    """Raises ``InputError`` naming ``flag`` unless ``path`` may be replaced as a whole:
    missing or empty; or, with ``overwrite``, holding nothing but entries that
    ``belongs(name)`` says are ``kind``'s (so that a mistyped folder is never wiped)."""
    require_folder(path, flag)
    names = sorted(n for n in os.listdir(path) if not n.startswith(STAGING_PREFIX)) \
        if os.path.isdir(path) else []
    if names and not overwrite:
        raise InputError(f"{flag}: {path} is not empty; pass --overwrite to replace it "
                         f"(or choose another folder)")
    foreign = [n for n in names if not belongs(n)]
    if foreign:
        raise InputError(f"{flag}: {path} holds {foreign[0]}, which is not part of {kind}; "
                         f"--overwrite replaces only a folder that holds nothing else: "
                         f"choose another folder")
