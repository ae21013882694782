"""What a run sets before TensorFlow's import where the user set nothing: the driver's
kernel cache size, and oneDNN on (TensorFlow's own default only on CPUs with AVX-512).
The Python API's own start is tested in a fresh process: the variable is read once, when
TensorFlow's libraries load."""

import subprocess
import sys

import pytest

from tests import command
from tfseg.runtime import caches

CUDA = {"CUDA_CACHE_MAXSIZE": str(4 * 2**30)}
NOTE = "oneDNN on (tfseg's default; TF_ENABLE_ONEDNN_OPTS=0 turns it off)"


def test_an_unset_cache_size_is_set_and_the_users_own_is_kept():
    environ = {}
    assert caches.warm_start(environ, tensorflow_imported=True) == CUDA
    assert environ == CUDA
    own = {"CUDA_CACHE_MAXSIZE": "1"}
    assert caches.warm_start(own, tensorflow_imported=True) == {}
    assert own == {"CUDA_CACHE_MAXSIZE": "1"}


def test_onednn_is_turned_on_only_where_unset_and_tensorflow_not_yet_imported():
    environ = {}
    assert caches.warm_start(environ, tensorflow_imported=False) == {
        **CUDA, "TF_ENABLE_ONEDNN_OPTS": "1"}
    assert environ["TF_ENABLE_ONEDNN_OPTS"] == "1"
    for own in ("0", "1", ""):  # the user's, whatever it says
        environ = {"TF_ENABLE_ONEDNN_OPTS": own}
        assert caches.warm_start(environ, tensorflow_imported=False) == CUDA
        assert environ["TF_ENABLE_ONEDNN_OPTS"] == own
    # Imported already (a notebook, this process): it would not be read; nothing is said.
    environ = {}
    assert caches.warm_start(environ, tensorflow_imported=True) == CUDA
    assert "TF_ENABLE_ONEDNN_OPTS" not in environ
    assert caches.onednn_note() is None  # a dict given is not this process's environment


# tfseg.evaluate in a fresh Python, as a user calls it: it fails (no checkpoint) after
# TensorFlow's import; then what oneDNN's variable and TensorFlow say, and what it logged.
API_SCRIPT = """
import os, tfseg
from tfseg.errors import InputError
lines = []
try:
    tfseg.evaluate(model_dir={model_dir!r}, log=lines.append)
except (InputError, OSError) as error:  # the command's one-line errors
    lines.append(str(error))
from tensorflow.python.util import _pywrap_util_port
print(os.environ.get("TF_ENABLE_ONEDNN_OPTS"), _pywrap_util_port.IsMklEnabled(), lines)
"""


# The user's own 0 in the slow tier: a fresh process each, and the fast tier's budget.
@pytest.mark.parametrize("own", [None, pytest.param("0", marks=pytest.mark.slow)],
                         ids=["unset", "users_0"])
def test_the_api_turns_onednn_on_before_tensorflow_where_the_user_set_nothing(tmp_path, own):
    env = {k: v for k, v in command.main_env().items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    if own is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = own
    proc = subprocess.run([sys.executable, "-c", API_SCRIPT.format(model_dir=str(tmp_path))],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stderr
    missing = f"--model_dir: no checkpoint in {tmp_path}; train first"
    expected = (f"1 True {[NOTE, missing]}" if own is None else f"0 False {[missing]}")
    assert proc.stdout.strip() == expected, proc.stderr
