"""``ModelDirLock``: one training run per folder; a dead run never blocks, and two starting
runs never both win (real processes)."""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tfseg.errors import InputError
from tfseg.training.lock import ModelDirLock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _holder(model_dir, hold_seconds):
    """A process that takes the lock, prints "held" or its refusal, and holds it a while."""
    code = f"""
import sys, time
from tfseg.errors import InputError
from tfseg.training.lock import ModelDirLock
try:
    with ModelDirLock({str(model_dir)!r}, log=lambda line: None):
        print("held", flush=True)
        time.sleep({hold_seconds})
except InputError as error:
    print(error, flush=True)
"""
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            cwd=ROOT)


def test_a_second_run_is_refused_naming_the_holder_until_it_ends(tmp_path):
    first = _holder(tmp_path, 60)
    assert first.stdout.readline().strip() == "held"
    with pytest.raises(InputError, match=f"^--model_dir: {tmp_path} is in use by another "
                                         f"training run \\(pid {first.pid}\\); stop it"):
        ModelDirLock(str(tmp_path)).__enter__()
    first.send_signal(signal.SIGKILL)  # no clean-up runs: the kernel drops the lock
    first.wait(timeout=30)
    with ModelDirLock(str(tmp_path)):
        assert (tmp_path / ".lock").read_text() == f"{socket.gethostname()} {os.getpid()}\n"
    assert (tmp_path / ".lock").read_text() == ""


def test_a_dead_holder_with_this_processes_pid_does_not_block(tmp_path):
    """A restarted container's trainer can get the killed one's pid: the file's contents
    are only for messages, never a claim."""
    (tmp_path / ".lock").write_text(f"{socket.gethostname()} {os.getpid()}\n")
    with ModelDirLock(str(tmp_path)) as lock:
        assert lock.fd is not None


@pytest.mark.slow
def test_two_runs_starting_together_on_a_stale_lock_never_both_win(tmp_path):
    (tmp_path / ".lock").write_text(f"{socket.gethostname()} 999999\n")  # a dead run's
    for _ in range(3):
        procs = [_holder(tmp_path, 3) for _ in range(2)]
        lines = sorted(p.stdout.readline().strip() for p in procs)
        for p in procs:
            p.wait(timeout=60)
        assert lines[1] == "held" and lines[0].startswith("--model_dir: "), lines
        time.sleep(0.1)


def test_a_failed_run_removes_the_lock_file_and_the_folders_it_made_and_nothing_else(
        tmp_path):
    """A refused run (a missing data set, found once the folder is held) leaves the
    folder as it found it."""
    with pytest.raises(InputError, match="refused"):
        with ModelDirLock(str(tmp_path / "new" / "run")):
            raise InputError("refused")
    assert os.listdir(tmp_path) == []
    (tmp_path / ".lock").write_text("")  # a previous run's: not this run's to remove
    with pytest.raises(InputError, match="refused"):
        with ModelDirLock(str(tmp_path)):
            raise InputError("refused")
    assert os.listdir(tmp_path) == [".lock"] and (tmp_path / ".lock").read_text() == ""


def test_importing_the_lock_imports_no_tensorflow():
    """main.py takes the lock before it builds anything: a second run is refused at once,
    without TensorFlow's seconds of import."""
    code = "import sys, tfseg.training.lock; assert 'tensorflow' not in sys.modules"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
