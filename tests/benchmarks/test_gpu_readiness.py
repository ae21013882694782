"""benchmarks/gpu_readiness.py: it needs the GPU kernel registry of a CUDA build of
TensorFlow; under tensorflow-cpu (this suite's) it exits 2 in one line, with no
TensorFlow start-up line before it."""

import os
import subprocess
import sys

import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.skipif(bool(tf.sysconfig.get_build_info().get("is_cuda_build")),
                    reason="a CUDA build runs the check itself")
def test_without_a_cuda_build_it_exits_2_in_one_line():
    # The user's environment, where TensorFlow's start-up lines would come first.
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS")}
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu_readiness.py"),
                           "--configs", "stock"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "benchmarks/gpu_readiness.py: needs the full tensorflow wheel (a CUDA build: its GPU "
        "kernel registry); this is a CPU-only build"], proc.stderr
