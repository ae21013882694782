"""tfseg.cli.stderr_filter: TensorFlow's log of an op's error left out of a command's
stderr, everything else passed on, a crash's last words included."""

import os
import subprocess
import sys

import pytest
from PIL import Image

from tests.command import MAIN, ROOT
from tests.data.trees import cityscapes_tree
from tfseg.cli import stderr_filter
from tfseg.data.feed import SKIP_HINT

# As TensorFlow 2.21 writes them when a data file is bad.
RENDEZVOUS = (b"W0000 00:00:1796228101.766604    9412 local_rendezvous.cc:412] Local rendezvous "
              b"is aborting with status: INVALID_ARGUMENT: assertion failed: [tfseg:] "
              b"[cannot read or decode image file a.png]\n\t [[{{node Assert/Assert}}]]\n")
READ_FAILED = (b"W0000 00:00:1796228622.501532   11040 op_kernel.cc:1858] OP_REQUIRES failed "
               b"at whole_file_read_ops.cc:117 : NOT_FOUND: ; No such file or directory\n")
OTHER = b"W0000 00:00:1796228622.5 11040 gpu_device.cc:2344] Cannot dlopen some GPU libraries.\n"
LAST_WORDS = b"F0000 00:00:1.0  7 check.cc:1] Check failed: last words\n"
OLD_STYLE = (b"2024-01-01 12:00:00.000001: W tensorflow/core/framework/op_kernel.cc:1830] "
             b"OP_REQUIRES failed at cast_op.cc:121 : UNIMPLEMENTED: Cast string to float\n")


def _filtered(*chunks):
    written, pending = [], list(chunks)
    stderr_filter.filter_lines(lambda: pending.pop(0) if pending else b"", written.append)
    return b"".join(written)


def test_the_records_repeating_an_error_go_with_their_continuation_lines():
    text = (b"tfseg: starting\n" + RENDEZVOUS + OTHER + READ_FAILED + OLD_STYLE
            + b"Traceback (most recent call last):\n  File \"x.py\", line 1\n")
    assert _filtered(text) == (b"tfseg: starting\n" + OTHER + b"Traceback (most recent "
                               b"call last):\n  File \"x.py\", line 1\n")


def test_tensorflow_lites_delegate_notice_is_left_out():
    notice = b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\n"
    assert _filtered(b"tfseg: predicting\n" + notice + OTHER) == b"tfseg: predicting\n" + OTHER


# As TensorFlow 2.21 writes it for each iterator of a strategy that fetches to the device.
UNOPTIMIZED = (b"W0000 00:00:1796320561.563647   29812 dataset.cc:997] Input of "
               b"GeneratorDatasetOp::Dataset will not be optimized because the dataset does "
               b"not implement the AsGraphDefInternal() method needed to apply optimizations.\n")


def test_the_warning_about_a_strategys_device_iterator_is_left_out():
    assert _filtered(b"step 1\n" + UNOPTIMIZED + OTHER) == b"step 1\n" + OTHER


def test_a_strategy_fetching_to_the_device_writes_nothing_through_the_filter():
    """--strategy=one_device, mirrored and multi_worker read batches this way."""
    script = ("import tensorflow as tf\nfrom tfseg.cli import stderr_filter\n"
              "from tfseg.data.feed import distribute\nstderr_filter.start()\n"
              "strategy = tf.distribute.OneDeviceStrategy('/cpu:0')\n"
              "print(sum(int(x.numpy().sum()) for x in distribute(tf.data.Dataset.range(4)"
              ".batch(2), strategy)))\nstderr_filter.stop()\n")
    env = dict(_env(), TF_CPP_MIN_LOG_LEVEL="1")  # tfseg's own level: warnings are shown
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)
    assert proc.returncode == 0 and proc.stdout == "6\n", proc.stderr
    assert "GeneratorDatasetOp" not in proc.stderr

def test_lines_split_across_reads_are_judged_whole_and_a_lone_partial_line_is_kept():
    # A record cut in two reads is still one record; a line without its newline, with
    # nothing more coming for a while (None), is passed on as it is.
    middle = len(RENDEZVOUS) // 2
    assert _filtered(RENDEZVOUS[:middle], RENDEZVOUS[middle:], b"50%", None, b" done\n") == (
        b"50% done\n")
    assert _filtered(OTHER[:10], None, OTHER[10:]) == OTHER


def _env():
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the tests' own default hides TensorFlow's log
    return env


def test_what_a_crashing_process_wrote_last_still_reaches_stderr():
    """The filter is a process of its own: an abort ends the run, not the filter, which
    writes what it got, and leaves out what it should."""
    written = RENDEZVOUS + LAST_WORDS
    script = ("import os\nfrom tfseg.cli import stderr_filter\nstderr_filter.start()\n"
              f"os.write(2, {written!r})\nos.abort()\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, cwd=ROOT,
                          env=_env(), timeout=60)
    assert proc.returncode < 0
    assert proc.stderr == LAST_WORDS


@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "verbose"])
def test_a_bad_data_file_is_one_line_and_tensorflows_own_lines_only_with_verbose(
        tmp_path, verbose):
    """A label of the wrong size, first in the split: three lines of TensorFlow's log
    came before tfseg's (two of them a read of an empty path), and nothing said that
    --skip_bad_examples would skip the file."""
    pairs = cityscapes_tree(tmp_path / "data", n=3)
    Image.new("L", (5, 3)).save(pairs[0][1])
    proc = subprocess.run([sys.executable, MAIN, "--mode=convert", "--dataset=cityscapes",
                           f"--data_dir={tmp_path / 'data'}", f"--tfrecord_dir={tmp_path / 'rec'}",
                           *(["--verbose"] if verbose else [])],
                          capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=180)
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = (f"tfseg: error: image {pairs[0][0]} is 12x16 but label {pairs[0][1]} is 3x5"
            f"{SKIP_HINT}")
    if verbose:
        assert "Local rendezvous is aborting" in proc.stderr and line in proc.stderr
    else:
        assert proc.stderr.splitlines() == [line]
    assert "; No such file or directory" not in proc.stderr  # no read of an empty path
