"""A model split across logical CPU devices against the same model on one: exact in
float64, each variable, momentum slot and backward op on its part's device.

Each case runs in a fresh process (``tests/split/on_devices.py``): TF fixes its
logical devices when it starts."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def on_devices(count, *args, timeout=600):
    return subprocess.run([sys.executable, "-m", "tests.split.on_devices", str(count), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))


@pytest.mark.slow
@pytest.mark.parametrize("devices,output_stride,norm,memory_saving", [
    pytest.param(3, 16, "batch", True, marks=pytest.mark.full),  # the twins' gradients, split
    (2, 8, "group", False),
])
def test_split_equals_one_device(devices, output_stride, norm, memory_saving):
    proc = on_devices(devices, "compare", str(output_stride), norm, str(int(memory_saving)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["devices"] == [f"CPU:{i}" for i in range(devices)]
    assert result["loss_diff"] == 0.0 and result["grad_diff"] < 1e-12, result
    one, split = result["losses"]
    assert one == pytest.approx(split, rel=1e-12)
    # Two SGD steps with momentum moved the weights, the same on both.
    assert result["update"] > 1e-3 and result["weight_diff"] < 1e-12, result
    assert result["misplaced"] == [] and result["slots_misplaced"] == []
    assert result["slots"] == result["trainable"] > 0
    # The backward pass runs on every device, and no backward conv is left to the
    # default device (a tf.GradientTape would leave them all unplaced).
    assert result["backprop_devices"] == result["devices"]
    assert result["backprop_unplaced"] == 0
