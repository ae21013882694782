"""Children die with their parent: a process tfseg starts (the report's measuring
process) ends when tfseg is stopped (real processes)."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.command import MAIN, ROOT, main_env


def _children(pid):
    """The pids of the children of process ``pid`` (their parent pid in /proc/PID/stat)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(name))
    return found


def _alive(pid):
    """True while ``pid`` runs (a zombie, reaped by init soon, counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.xdist_group("measure")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_the_measuring_process_of_a_report_ends_with_it(tmp_path, sig):
    proc = subprocess.Popen(
        [sys.executable, MAIN, "--mode=report", f"--model_dir={tmp_path / 'run'}",
         "--width_multiplier=0.25", "--middle_repeats=1", "--crop_size=64,64",
         "--batch_size=2", "--report_repeats=1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=main_env(), cwd=ROOT)
    try:
        _stop_while_measuring(proc, sig)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _stop_while_measuring(proc, sig):
    seen = ""
    while not re.search(r"measuring \w+", seen):
        line = proc.stdout.readline()
        assert line or proc.poll() is None, seen[-3000:]
        seen += line
    deadline = time.time() + 60
    while not _children(proc.pid) and time.time() < deadline:
        time.sleep(0.05)
    children = _children(proc.pid)
    assert children, "no measuring process started"
    time.sleep(1)  # well into its start-up
    os.kill(proc.pid, sig)
    proc.wait(timeout=60)
    deadline = time.time() + 5
    while any(map(_alive, children)) and time.time() < deadline:
        time.sleep(0.05)
    left = [pid for pid in children if _alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"the measuring process {left} outlived tfseg (signal {sig.name})"
