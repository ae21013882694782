"""Every benchmark refuses a bad argument in one line on stderr, exit status 2, with no
TensorFlow start-up line before it (benchmarks/refusal.py), in the user's environment:
without the TF_CPP_MIN_LOG_LEVEL and TF_ENABLE_ONEDNN_OPTS the suite sets for itself."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The benchmarks a user runs (gpu_child.py is gpu.py's; gpu_table.py, loop_sampler.py and
# refusal.py are modules). memory.py and input_pipeline.py import TensorFlow before parsing.
COMMANDS = ("dilated", "export", "gpu", "gpu_loop", "gpu_readiness", "input_pipeline",
            "launches", "memory", "ops", "optimizer_peak", "rewrite", "split")


def test_every_benchmark_command_is_checked():
    found = {name[:-3] for name in os.listdir(os.path.join(ROOT, "benchmarks"))
             if name.endswith(".py")}
    assert found - set(COMMANDS) == {"families", "gpu_child", "gpu_table", "grad_error",
                                     "loop_sampler", "refusal"}


@pytest.mark.parametrize("name", COMMANDS)
def test_a_bad_argument_is_one_line_and_exit_2(name):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS")}
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", f"{name}.py"),
                           "--no_such_argument"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"benchmarks/{name}.py: unrecognized arguments: --no_such_argument "
        f"(--help lists the arguments)"], proc.stderr
    assert proc.stdout == ""
