"""The suite's own rules (tests/rules.py): where ``CI`` is set, an unmarked test over
``slow_seconds`` fails, naming itself (twice that in a run that holds slow tests too);
elsewhere it passes and the run's last line names it; slow and grouped tests are collected
first."""

import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CASES = '''
import time
import pytest

def busy(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass

def test_quick():
    pass

def test_unmarked_and_slow():
    busy(1.5)

def test_unmarked_and_slower():
    busy(2.5)

def test_unmarked_and_waiting():
    # As a test starved by another worker's: its wall time grows, its CPU time does not.
    time.sleep(2.5)

@pytest.mark.slow
def test_marked_and_slow():
    busy(1.5)

@pytest.mark.xdist_group("measure")
def test_grouped():
    pass
'''


def _pytest(folder, *args, ci="1"):
    """pytest on ``folder`` with ``CI`` set to ``ci`` ("" or None: not set)."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "-o", "slow_seconds=1", *args, str(folder)], capture_output=True,
                          text=True, timeout=120, cwd=folder, env=env)


def _suite(folder):
    shutil.copy(os.path.join(ROOT, "tests", "rules.py"), folder / "rules.py")
    (folder / "conftest.py").write_text("from rules import *  # noqa: F401,F403\n")
    (folder / "test_cases.py").write_text(CASES)


def test_an_unmarked_slow_test_fails_naming_itself_and_slow_ones_come_first(tmp_path):
    _suite(tmp_path)
    proc = _pytest(tmp_path, "-v", "-rf")
    assert proc.returncode == 1, proc.stdout[-3000:]
    ran = [line.split("::")[1].split()[:2] for line in proc.stdout.splitlines()
           if line.startswith("test_cases.py::") and line.rstrip().endswith("%]")]
    assert ran == [["test_marked_and_slow", "PASSED"], ["test_grouped", "PASSED"],
                   ["test_quick", "PASSED"], ["test_unmarked_and_slow", "PASSED"],
                   ["test_unmarked_and_slower", "FAILED"],
                   ["test_unmarked_and_waiting", "PASSED"]], proc.stdout
    assert ("test_cases.py::test_unmarked_and_slower took 2.5 s, over the 2 s of an unmarked "
            "test in a run beside slow tests: mark it @pytest.mark.slow") in proc.stdout, \
        proc.stdout[-3000:]
    # The fast tier alone: the limit itself.
    proc = _pytest(tmp_path, "-v", "-rf", "-m", "not slow")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert ("test_cases.py::test_unmarked_and_slow took 1.5 s, over the 1 s of an unmarked "
            "test: mark it @pytest.mark.slow") in proc.stdout, proc.stdout[-3000:]
    assert "test_unmarked_and_slower took 2.5 s, over the 1 s" in proc.stdout


def test_outside_ci_an_unmarked_slow_test_passes_and_the_last_line_names_it(tmp_path):
    """A user's machine, slower or busier than CI's, saw red where nothing was wrong."""
    _suite(tmp_path)
    named = ("2 unmarked tests took over 1 s, a failure where CI is set (mark it "
             "@pytest.mark.slow, or make it faster): test_cases.py::test_unmarked_and_slower "
             "(2.5 s), test_cases.py::test_unmarked_and_slow (1.5 s)")
    proc = _pytest(tmp_path, "-m", "not slow", ci=None)
    assert proc.returncode == 0, proc.stdout[-3000:]
    last = proc.stdout.strip().splitlines()[-2:]
    assert last[0] == named and last[1].startswith("=") and " 5 passed" in last[1], \
        proc.stdout[-3000:]
    # CI set but empty counts as not set.
    proc = _pytest(tmp_path, "-m", "not slow", "-k", "not slower", ci="")
    assert proc.returncode == 0 and (
        "1 unmarked test took over 1 s, a failure where CI is set (mark it @pytest.mark.slow, "
        "or make it faster): test_cases.py::test_unmarked_and_slow (1.5 s)") in proc.stdout, \
        proc.stdout[-3000:]
    # With xdist's workers (the README's -n auto): their reports carry the times over.
    proc = _pytest(tmp_path, "-m", "not slow", "-n", "2", ci=None)
    assert proc.returncode == 0 and named in proc.stdout, proc.stdout[-3000:]
    # Where nothing took over the limit: no such line.
    proc = _pytest(tmp_path, "-k", "quick or grouped", ci=None)
    assert proc.returncode == 0 and "unmarked test" not in proc.stdout, proc.stdout[-3000:]
