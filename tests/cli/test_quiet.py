"""A one-line error is the only line: TensorFlow's start-up lines are kept out of it."""

import os
import subprocess
import sys

from tests import command


def _env(**extra):
    """The user's environment: no TF_CPP_MIN_LOG_LEVEL (the suite sets one for itself)."""
    env = {k: v for k, v in command.main_env().items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return dict(env, **extra)


def test_an_error_after_tensorflow_is_imported_is_the_only_line_on_stderr(tmp_path):
    proc = subprocess.run([sys.executable, command.MAIN, "--mode=eval",
                           f"--model_dir={tmp_path}"], capture_output=True, text=True,
                          env=_env(), cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"tfseg: error: --model_dir: no checkpoint in {tmp_path}; train first"], proc.stderr
    assert proc.stdout == ""


def test_verbose_keeps_tensorflows_lines(tmp_path):
    code = ("import sys; from tfseg.cli import quiet; quiet.import_tensorflow(verbose=True); "
            "import tensorflow as tf; tf.zeros(1)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    # The lines the quiet import drops: shown when asked for (the test of the test).
    assert "oneDNN" in proc.stderr or "absl::InitializeLog" in proc.stderr, proc.stderr


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
