"""Progress lines: plain text with units, whatever stdout is."""

import os
import re
import subprocess
import sys

import pytest

from tfseg.runtime import device
from tfseg.training.progress import Progress, duration

# Control characters other than the newline: ANSI escapes, backspaces, carriage returns.
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")


def test_a_line_has_units_and_sensible_precision():
    progress = Progress(total=1500, start=0)
    line = progress.line(250, loss=0.41273, lr=0.0421337, images_per_s=38.2468,
                         peak=("rss_peak_MiB", 1034.6), now=progress.began + 50.0)
    assert line == ("step  250/1500  16%  loss 0.4127  lr 0.0421  38.2 img/s  "
                    "rss_peak 1,035 MiB  eta 4:10")


def test_the_last_line_says_how_long_the_run_took_and_a_resumed_eta_counts_from_its_start():
    progress = Progress(total=100, start=60)
    assert progress.line(80, 1.0, 0.0, 5.0, ("gpu_peak_MiB", 3.0),
                         now=progress.began + 20).endswith("eta 0:20")
    assert progress.line(100, 1.0, 0.0, 5.0, ("gpu_peak_MiB", 3.0),
                         now=progress.began + 3725).endswith("took 1:02:05")
    assert duration(59.6) == "1:00"


def test_a_training_run_written_to_a_file_has_no_control_characters(trained_run):
    """The run's stdout and stderr, as captured to files (tests.command), are plain lines."""
    _, _, proc = trained_run
    lines = [line for line in proc.stdout.splitlines() if line.startswith("step ")]
    assert len(lines) == 6, proc.stdout  # --log_every=1
    assert not CONTROL.search(proc.stdout) and not CONTROL.search(proc.stderr), \
        repr(CONTROL.findall(proc.stdout + proc.stderr))


_SMALL_STEP_SCRIPT = """
import tensorflow as tf
from tfseg.training import progress
progress.memory_peak()  # the window starts here
small = [tf.fill([1024], 1.0) + 1.0 for _ in range(64)]  # 4 KiB each: none counted
one = tf.fill([300 * 1024 // 4], 1.0)  # 300 KiB: counted, all the allocator sees
print(*progress.memory_peak())
"""


@pytest.mark.skipif(device.name() != "CPU:0", reason="a GPU's allocator counts every buffer")
def test_a_peak_the_cpu_allocator_barely_saw_reads_the_resident_size():
    """oneDNN's CPU allocator counts no buffer under 256 KiB: a window whose buffers are
    mostly smaller reads a fraction of a MiB (shown as "cpu_peak 0 MiB"); the line shows
    the resident size instead, labelled as such."""
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1", TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", _SMALL_STEP_SCRIPT], capture_output=True,
                          text=True, env=env, timeout=120, check=True)
    label, mib = proc.stdout.strip().splitlines()[-1].split()
    assert label == "rss_peak_MiB" and float(mib) > 1, proc.stdout
