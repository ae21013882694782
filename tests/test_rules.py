"""The suite's own rules (tests/rules.py): an unmarked test over ``slow_seconds`` fails,
naming itself (twice that in a run that holds slow tests too); slow and grouped tests are
collected first."""

import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CASES = '''
import time
import pytest

def test_quick():
    pass

def test_unmarked_and_slow():
    time.sleep(1.5)

def test_unmarked_and_slower():
    time.sleep(2.5)

@pytest.mark.slow
def test_marked_and_slow():
    time.sleep(1.5)

@pytest.mark.xdist_group("measure")
def test_grouped():
    pass
'''


def _pytest(folder, *args):
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "-o", "slow_seconds=1", *args, str(folder)], capture_output=True,
                          text=True, timeout=120, cwd=folder)


def test_an_unmarked_slow_test_fails_naming_itself_and_slow_ones_come_first(tmp_path):
    shutil.copy(os.path.join(ROOT, "tests", "rules.py"), tmp_path / "rules.py")
    (tmp_path / "conftest.py").write_text("from rules import *  # noqa: F401,F403\n")
    (tmp_path / "test_cases.py").write_text(CASES)
    proc = _pytest(tmp_path, "-v", "-rf")
    assert proc.returncode == 1, proc.stdout[-3000:]
    ran = [line.split("::")[1].split()[:2] for line in proc.stdout.splitlines()
           if line.startswith("test_cases.py::") and line.rstrip().endswith("%]")]
    assert ran == [["test_marked_and_slow", "PASSED"], ["test_grouped", "PASSED"],
                   ["test_quick", "PASSED"], ["test_unmarked_and_slow", "PASSED"],
                   ["test_unmarked_and_slower", "FAILED"]], proc.stdout
    assert ("test_cases.py::test_unmarked_and_slower took 2.5 s, over the 2 s of an unmarked "
            "test in a run beside slow tests: mark it @pytest.mark.slow") in proc.stdout, \
        proc.stdout[-3000:]
    # The fast tier alone: the limit itself.
    proc = _pytest(tmp_path, "-v", "-rf", "-m", "not slow")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert ("test_cases.py::test_unmarked_and_slow took 1.5 s, over the 1 s of an unmarked "
            "test: mark it @pytest.mark.slow") in proc.stdout, proc.stdout[-3000:]
    assert "test_unmarked_and_slower took 2.5 s, over the 1 s" in proc.stdout
