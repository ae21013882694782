"""benchmarks/gpu_readiness.py: it needs the GPU kernel registry of a CUDA build of
TensorFlow; under tensorflow-cpu (this suite's) it exits 2 in one line."""

import os
import subprocess
import sys

import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.skipif(bool(tf.sysconfig.get_build_info().get("is_cuda_build")),
                    reason="a CUDA build runs the check itself")
def test_without_a_cuda_build_it_exits_2_in_one_line():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu_readiness.py"),
                           "--configs", "stock"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines()
             if line.startswith("benchmarks/gpu_readiness.py")]
    assert len(lines) == 1 and "full tensorflow wheel" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
