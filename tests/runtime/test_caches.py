"""The compilation caches a run sets up where the user set none."""

import os
import subprocess
import sys

import pytest

from tfseg.runtime import caches


def test_unset_caches_are_set_and_the_users_own_are_kept(tmp_path):
    environ = {"XDG_CACHE_HOME": str(tmp_path)}
    done = caches.warm_start(environ)
    assert environ["CUDA_CACHE_MAXSIZE"] == str(4 * 2**30)
    folder = tmp_path / "tfseg" / "xla"
    assert environ["TF_XLA_FLAGS"] == f"--tf_xla_persistent_cache_directory={folder}"
    assert folder.is_dir() and done == {k: environ[k] for k in ("CUDA_CACHE_MAXSIZE",
                                                                 "TF_XLA_FLAGS")}
    own = {"XDG_CACHE_HOME": str(tmp_path), "CUDA_CACHE_MAXSIZE": "1",
           "TF_XLA_FLAGS": "--tf_xla_auto_jit=2 --tf_xla_persistent_cache_directory=/mine"}
    kept = dict(own)
    assert caches.warm_start(kept) == {} and kept == own
    other = {"XDG_CACHE_HOME": str(tmp_path), "TF_XLA_FLAGS": "--tf_xla_auto_jit=2"}
    caches.warm_start(other)
    assert other["TF_XLA_FLAGS"] == f"--tf_xla_auto_jit=2 {caches.XLA_FLAG}={folder}"


def test_a_cache_folder_that_cannot_be_made_is_left_out(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    environ = {"XDG_CACHE_HOME": str(blocker)}
    assert caches.warm_start(environ) == {"CUDA_CACHE_MAXSIZE": str(4 * 2**30)}
    assert "TF_XLA_FLAGS" not in environ


@pytest.mark.slow  # two fresh TensorFlow processes
def test_a_compiled_function_lands_in_the_cache_a_second_process_reads(tmp_path):
    code = ("from tfseg.runtime import caches; caches.warm_start()\n"
            "import tensorflow as tf\n"
            "f = tf.function(lambda x: tf.reduce_sum(tf.sin(x) * x), jit_compile=True)\n"
            "print(float(f(tf.ones([97]))))\n")
    env = {k: v for k, v in os.environ.items() if k != "TF_XLA_FLAGS"}
    env.update(XDG_CACHE_HOME=str(tmp_path), TF_CPP_MIN_LOG_LEVEL="2")
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=120)
    assert first.returncode == 0, first.stderr[-2000:]
    stored = sorted(os.listdir(tmp_path / "tfseg" / "xla"))
    assert stored and all(name.startswith("xla_compile_cache") for name in stored)
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=120)
    assert second.stdout == first.stdout
    assert sorted(os.listdir(tmp_path / "tfseg" / "xla")) == stored  # read, not compiled again
