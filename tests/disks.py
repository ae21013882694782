"""Disks that take no file: a full one and a read-only one, each a real tmpfs mounted
here, so that the kernel refuses the writes as a user's disk would. A test that needs
one is skipped where this user may not mount."""

import contextlib
import subprocess

import pytest

KINDS = ("full", "read_only")
# What fills the full disk; what the read-only one holds (an existing folder in it).
FILLER, FOLDER = "filler", "a"


@contextlib.contextmanager
def unwritable(path, kind):
    """Yields ``path`` (a ``pathlib.Path``, made here) mounted as a disk of ``kind``:
    "full" (1 MB, all of it taken by ``FILLER``: a file can be made, not written) or
    "read_only" (holding the empty folder ``FOLDER``). Unmounted at the end."""
    path.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)],
                      capture_output=True).returncode != 0:
        pytest.skip("no right to mount a tmpfs here")
    try:
        if kind == "full":  # dd stops when the disk is full
            subprocess.run(["dd", "if=/dev/zero", f"of={path / FILLER}", "bs=64k"],
                           capture_output=True)
        else:
            (path / FOLDER).mkdir()
            subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)
        yield path
    finally:
        # Lazily: a process that still holds a file there (a leaked descriptor) does not
        # keep the disk mounted after the test.
        subprocess.run(["umount", "--lazy", str(path)], check=True)
