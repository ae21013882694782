"""Progress lines: plain text with units, whatever stdout is."""

import re

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
