"""Children die with their parent: a process tfseg starts (the report's measuring
process) ends when tfseg is stopped (real processes)."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.command import MAIN, ROOT, alive, children, main_env


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
    while not children(proc.pid) and time.time() < deadline:
        time.sleep(0.05)
    kids = children(proc.pid)
    assert kids, "no measuring process started"
    time.sleep(1)  # well into its start-up
    os.kill(proc.pid, sig)
    proc.wait(timeout=60)
    deadline = time.time() + 5
    while any(map(alive, kids)) and time.time() < deadline:
        time.sleep(0.05)
    left = [pid for pid in kids if alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"the measuring process {left} outlived tfseg (signal {sig.name})"
