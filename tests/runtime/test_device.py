"""The device measurements read, chosen in one place, and its overhead: 0 on the CPU,
the flag's when given, measured with NVML on a GPU or refused in one line without it."""

import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from tfseg.errors import InputError
from tfseg.runtime import device
from tfseg.units import GIB

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_measured_device_is_the_gpu_when_there_is_one_else_the_cpu():
    assert device.name() == ("GPU:0" if tf.config.list_physical_devices("GPU") else "CPU:0")
    # Its allocator's statistics: tests/train/test_step.py (a fresh process, oneDNN on).


def test_the_overhead_is_the_flags_when_given_and_zero_on_the_cpu():
    given = device.overhead(0.25)
    assert (given.bytes, given.source) == (GIB // 4, "--device_overhead_gb")
    assert given.to_dict() == {"device": device.name(), "overhead_bytes": GIB // 4,
                               "overhead_source": "--device_overhead_gb"}
    if device.name() == "CPU:0":
        assert device.overhead(-1).bytes == 0
        assert device.overhead(-1, required=False).bytes == 0


def test_the_gpu_probe_measures_or_refuses_in_one_line_naming_the_flag():
    """Without a GPU or without NVML (nvidia-ml-py) the probe exits 2 with one line, and
    the overhead it would give is refused naming --device_overhead_gb; with both, it is
    the process's device memory outside TF's allocator."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-m", "tfseg.runtime.device"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    if proc.returncode == 0:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        assert 0 < result["overhead_bytes"] <= result["process_bytes"]
        assert device.measured_gpu_overhead() > 0
        return
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "NVML" in lines[0] or "no GPU" in lines[0], lines
    with pytest.raises(InputError) as error:
        device.measured_gpu_overhead()
    message = str(error.value)
    assert message.startswith("--device_overhead_gb: could not measure") and "\n" not in message
