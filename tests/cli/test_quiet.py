"""Quiet, not deaf: TensorFlow's start-up lines are kept out, its warnings and errors reach
stderr one line each, and the command names the device it runs on.

The processes run in the user's environment: without the TF_CPP_MIN_LOG_LEVEL that the
suite sets for itself, where the start-up lines would appear, and with oneDNN off and on
(TF_ENABLE_ONEDNN_OPTS=0 and 1): TensorFlow turns it on by default only on CPUs with
AVX-512, and its start-up lines differ, so both are tested on any CPU."""

import os
import subprocess
import sys

import pytest
import tensorflow as tf

from tests import command
from tfseg.cli import quiet
from tfseg.runtime import device

# What TensorFlow writes on start-up: with oneDNN on, and (the CPU's features the binary
# does not use) on most CPUs.
START_UP = ("absl::InitializeLog", "oneDNN custom operations", "cpu_feature_guard",
            "This TensorFlow binary is optimized")
# oneDNN off, as TensorFlow leaves it on CPUs without AVX-512, and on.
ONEDNN = pytest.mark.parametrize("onednn", ["0", "1"], ids=["onednn_off", "onednn_on"])
# A C++ LOG(WARNING) the CPU gives: an iterator of a cached dataset that stops early.
CACHE_WARNING = "The calling iterator did not fully read the dataset being cached"


def _env(**extra):
    """The user's environment: the suite's TensorFlow log and oneDNN settings removed
    (``extra`` sets them again where a test needs one)."""
    env = {k: v for k, v in command.main_env().items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS")}
    return dict(env, **extra)


@ONEDNN
def test_the_command_names_its_device_keeps_warnings_and_drops_start_up_lines(tmp_path,
                                                                             onednn):
    """``tfseg --mode=eval`` whose mode first makes TensorFlow's C++ code log a warning,
    then runs the real evaluation, which refuses (no checkpoint). With oneDNN off the
    import logged nothing, and absl's "All log messages before absl::InitializeLog()"
    notice came out before the warning."""
    script = f"""
import sys
from tfseg.cli import main, modes

def eval_after_a_warning(config):
    import tensorflow as tf
    iterator = iter(tf.data.Dataset.range(4).cache())
    next(iterator)
    del iterator  # the warning: the cache was not filled
    modes.run_eval(config)

modes.MODES["eval"] = eval_after_a_warning
sys.argv = ["tfseg", "--mode=eval", "--model_dir={tmp_path}"]
main.run()
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=_env(TF_ENABLE_ONEDNN_OPTS=onednn), cwd=tmp_path, timeout=180)
    assert proc.returncode == 2, proc.stderr
    assert not [word for word in START_UP if word in proc.stderr], proc.stderr
    assert proc.stdout.splitlines() == [device.describe()], proc.stdout
    warning, error = proc.stderr.splitlines()
    assert CACHE_WARNING in warning and warning.startswith("W"), proc.stderr
    assert error == f"tfseg: error: --model_dir: no checkpoint in {tmp_path}; train first"


@ONEDNN
def test_verbose_keeps_tensorflows_lines(onednn):
    """The lines the quiet import drops are shown when asked for: those of a plain import
    of TensorFlow in the same environment (the test of the test)."""
    env = _env(TF_ENABLE_ONEDNN_OPTS=onednn)
    plain = subprocess.run([sys.executable, "-c", "import tensorflow"], capture_output=True,
                           text=True, env=env, timeout=120)
    shown = [word for word in START_UP if word in plain.stderr]
    # oneDNN's line wherever it is on, and with it absl's notice, which comes first.
    assert ("oneDNN custom operations" in shown) == (onednn == "1"), plain.stderr
    assert "absl::InitializeLog" in shown or not shown, plain.stderr
    code = ("import sys; from tfseg.cli import quiet; "
            "print(quiet.import_tensorflow(verbose=True)); "
            "import tensorflow as tf; tf.zeros(1)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert all(word in proc.stderr for word in shown), (shown, proc.stderr)
    assert proc.stdout.startswith("device: "), proc.stdout


# The user's own 0 in the slow tier: a fresh process each, and the fast tier's budget.
@pytest.mark.parametrize("own", [None, pytest.param("0", marks=pytest.mark.slow)],
                         ids=["unset", "users_0"])
def test_the_command_turns_onednn_on_where_unset_and_its_device_line_says_so(tmp_path, own):
    """Where the user has not set TF_ENABLE_ONEDNN_OPTS, the command sets it to 1 before
    TensorFlow's import (TensorFlow's own default is on only with AVX-512), and the CPU's
    device line ends saying so; a user's 0 is kept, and the line says nothing of it."""
    script = f"""
import os, sys
from tfseg.cli import main, modes

def eval_that_reports(config):
    from tensorflow.python.util import _pywrap_util_port
    print(os.environ.get("TF_ENABLE_ONEDNN_OPTS"), _pywrap_util_port.IsMklEnabled())

modes.MODES["eval"] = eval_that_reports
sys.argv = ["tfseg", "--mode=eval", "--model_dir={tmp_path}"]
main.run()
"""
    env = _env() if own is None else _env(TF_ENABLE_ONEDNN_OPTS=own)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stderr
    line = device.describe()  # this process's: the suite set the variable itself
    on_cpu = not tf.config.get_visible_devices("GPU")
    if own is None:
        note = "; oneDNN on (tfseg's default; TF_ENABLE_ONEDNN_OPTS=0 turns it off)"
        assert proc.stdout.splitlines() == [line + note * on_cpu, "1 True"], proc.stdout
    else:
        assert proc.stdout.splitlines() == [line, "0 False"], proc.stdout
    assert not proc.stderr, proc.stderr


def test_a_failed_import_shows_what_was_captured(tmp_path):
    """The captured lines are what explains a broken install: shown, then the error."""
    (tmp_path / "tensorflow.py").write_text(
        "import os\nos.write(2, b'broken install: libfoo.so missing\\n')\nraise ImportError('x')\n")
    code = "from tfseg.cli import quiet; quiet.import_tensorflow()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(PYTHONPATH=str(tmp_path) + os.pathsep + command.ROOT),
                          timeout=120)
    assert proc.returncode == 1
    assert "broken install: libfoo.so missing" in proc.stderr and "ImportError" in proc.stderr


# What a CUDA build of TensorFlow 2.x writes where its GPU libraries are broken, around
# tensorflow-cpu's own start-up lines (each library logs them once: twice in all).
CAPTURED = """\
WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
I0000 00:00:1795832462.963702   11212 port.cc:153] oneDNN custom operations are on.
I0000 00:00:1795832463.120263   11212 cpu_feature_guard.cc:227] This TensorFlow binary is\
 optimized to use available CPU instructions in performance-critical operations.
To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow.
I0000 00:00:1795832463.2   11212 cudart_stub.cc:31] Could not find cuda drivers on your\
 machine, GPU will not be used.
WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
I0000 00:00:1795832481.264642   11212 port.cc:153] oneDNN custom operations are on.
E0000 00:00:1795832481.9   11212 cuda_fft.cc:467] Unable to register cuFFT factory
E0000 00:00:1795832482.1   11212 cuda_fft.cc:467] Unable to register cuFFT factory
W0000 00:00:1795832483.5   11212 gpu_device.cc:2344] Cannot dlopen some GPU libraries.
Skipping registering GPU devices...
/site-packages/keras/x.py:3: UserWarning: a warning of Python's own
"""


def test_sort_drops_info_records_and_repeats_and_keeps_each_warning_as_one_line():
    lines, gpu_notes = quiet.sort(CAPTURED)
    assert [line for line, _ in lines] == [
        "E0000 00:00:1795832481.9   11212 cuda_fft.cc:467] Unable to register cuFFT factory",
        "W0000 00:00:1795832483.5   11212 gpu_device.cc:2344] Cannot dlopen some GPU "
        "libraries. Skipping registering GPU devices...",
        "/site-packages/keras/x.py:3: UserWarning: a warning of Python's own"]
    assert [about_gpus for _, about_gpus in lines] == [False, True, False]
    # What explains finding no GPU, the INFO record included, for the device line.
    assert gpu_notes == [
        "Could not find cuda drivers on your machine, GPU will not be used.",
        "Cannot dlopen some GPU libraries. Skipping registering GPU devices..."]


def test_the_device_line_names_the_device_and_why_there_is_no_gpu():
    line = device.describe()
    if tf.config.get_visible_devices("GPU"):
        details = tf.config.experimental.get_device_details(tf.config.get_visible_devices("GPU")[0])
        assert line.startswith(f"device: GPU:0 ({details['device_name']})"), line
    elif not tf.test.is_built_with_cuda():
        assert line == ("device: CPU (TensorFlow sees no GPU: this TensorFlow build has no "
                        "CUDA (the gpu extra has one: pip install 'tfseg[gpu]'))")
    # On a CUDA build: what TensorFlow logged, then the environment's hiding of GPUs.
    logged = ["failed call to cuInit: CUDA_ERROR_NO_DEVICE", "Cannot dlopen some GPU libraries."]
    assert device.no_gpu_reason(True, 0, logged, environ={}) == "; ".join(logged)
    assert device.no_gpu_reason(True, 0, logged, environ={"CUDA_VISIBLE_DEVICES": "-1"}) == \
        "CUDA_VISIBLE_DEVICES='-1'"
    assert device.no_gpu_reason(True, 2, (), environ={}) == \
        "2 hidden by tf.config.set_visible_devices"
    assert device.no_gpu_reason(True, 0, (), environ={}) is None


def test_an_imported_tensorflow_is_only_described(capfd):
    """In a process that has TensorFlow (the in-process command of the tests, a notebook),
    the import writes nothing and still returns the device line."""
    assert quiet.import_tensorflow() == device.describe()
    assert capfd.readouterr() == ("", "")


def test_text_after_an_info_record_is_its_own_not_the_records():
    """Python's logging and a traceback after an INFO record are shown, not dropped with
    it (nor folded into the device line's reason after a GPU record)."""
    captured = ("I0000 00:00:1.0  7 cuda_executor.cc:1] Could not find cuda drivers on your "
                "machine, GPU will not be used.\n"
                "WARNING:tensorflow:From x.py:3: something is deprecated\n"
                "Traceback (most recent call last):\n"
                "ValueError: boom\n")
    lines, gpu_notes = quiet.sort(captured)
    assert [line for line, _ in lines] == ["WARNING:tensorflow:From x.py:3: something is "
                                           "deprecated", "Traceback (most recent call last):",
                                           "ValueError: boom"]
    assert gpu_notes == ["Could not find cuda drivers on your machine, GPU will not be used."]


def test_a_crash_while_captured_still_reports_on_the_real_stderr(tmp_path):
    """An abort (a FATAL record's end) runs no cleanup: Python's fault report still reaches
    the real stderr, and what was captured stays in a file in the temporary folder."""
    code = ("import os\nfrom tfseg.cli import quiet\nwith quiet._captured():\n"
            "    os.write(2, b'F0000 00:00:1.0  7 x.cc:1] Check failed: a mismatch\\n')\n"
            "    os.abort()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(TMPDIR=str(tmp_path)), timeout=120)
    assert proc.returncode != 0
    assert "Fatal Python error: Aborted" in proc.stderr, proc.stderr
    kept = list(tmp_path.glob("tfseg-start-up-*.log"))
    assert len(kept) == 1 and "Check failed: a mismatch" in kept[0].read_text()
