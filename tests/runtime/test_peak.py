"""When an allocator's peak measures a step (`tfseg.runtime.peak`), and the fact it rests
on: oneDNN's CPU allocator counts no buffer under 256 KiB, TensorFlow's BFC one every
buffer."""

import json
import os
import subprocess
import sys

import pytest

from tfseg.runtime import peak

KIB, MIB = 1024, 2**20

_COUNTED_SCRIPT = """
import json
import tensorflow as tf
from tfseg.runtime import peak

counted, keep = {}, []
for size in (4 * 1024, 128 * 1024, 256 * 1024 - 4, 256 * 1024, 512 * 1024):
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    keep.append(tf.fill([size // 4], 1.0))
    counted[size] = tf.config.experimental.get_memory_info("CPU:0")["current"] - before
print(json.dumps({"counted": counted, "uncounted_below": peak.uncounted_below("CPU:0")}))
"""


@pytest.mark.parametrize("bfc", ["0", "1"])
def test_the_cpu_allocator_counts_what_uncounted_below_says(bfc):
    """oneDNN's allocator (tfseg's default on the CPU) leaves every buffer under 256 KiB
    out of its statistics; ``TF_CPU_ALLOCATOR_USE_BFC=1`` counts them all. A TensorFlow
    that changes either fails here, not in a report that reads 0."""
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1", TF_CPU_ALLOCATOR_USE_BFC=bfc,
               TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", _COUNTED_SCRIPT], capture_output=True,
                          text=True, env=env, timeout=120, check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    below = result["uncounted_below"]
    assert below == (0 if bfc == "1" else 256 * KIB)
    for size, counted in result["counted"].items():
        # BFC rounds a request up to 256 bytes
        assert counted == (0 if int(size) < below else -(-int(size) // 256) * 256), result


def test_a_peak_is_measured_only_where_the_allocator_saw_the_step():
    cpu, gpu = "CPU:0", "GPU:0"
    assert peak.measured(None, cpu) is None and peak.measured(0, gpu) is None
    # One buffer's worth on the CPU is not the step's: its smaller buffers went uncounted.
    assert peak.measured(300 * KIB, cpu, environ={}) is None
    assert peak.measured(MIB - 1, cpu, environ={}) is None
    assert peak.measured(MIB, cpu, environ={}) == MIB
    assert peak.measured(300 * KIB, gpu, environ={}) == 300 * KIB  # BFC counts every buffer
    assert peak.measured(300 * KIB, cpu, environ={"TF_CPU_ALLOCATOR_USE_BFC": "true"}) == 300 * KIB


def test_a_median_or_largest_of_peaks_with_an_unknown_one_is_unknown():
    assert peak.median([3, 1, 5]) == 3 and peak.largest([3, 1, 5]) == 5
    assert peak.median([3, None, 5]) is None and peak.largest([None]) is None
    assert peak.median([]) is None
