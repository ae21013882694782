"""benchmarks/peers/torch_deeplab.py (the PyTorch peer) in a Python without torch, as
tfseg's own environment is: it refuses in one line naming torch, exit 2, and never needs
torch to parse its arguments. Its dry run itself needs torch and timm, so no test runs it."""

import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "peers", "torch_deeplab.py")

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is not None,
                                reason="the refusal is for a Python without torch")


def _run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_without_torch_the_dry_run_exits_2_in_one_line_naming_torch():
    proc = _run("--cpu")
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("benchmarks/peers/torch_deeplab.py: needs torch and timm"), line
    assert "No module named 'torch'" in line, line
    assert proc.stdout == ""


def test_a_bad_size_is_one_line_and_exit_2_before_torch_is_looked_for():
    proc = _run("--cpu", "--sizes", "65x97")
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.splitlines()
    assert "'65x97' is not HxWxB" in line and "needs torch" not in line, line
