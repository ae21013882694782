"""tfseg.runtime.pinned: a checkpoint being read survives a rotation that removes it."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfseg.runtime.pinned import pinned
from tfseg.runtime.state import VanishedCheckpoint


def _saved(folder):
    """A checkpoint of one variable (values 0..5) in ``folder``; its prefix."""
    return tf.train.Checkpoint(v=tf.Variable(np.arange(6, dtype=np.float32))).save(
        os.path.join(folder, "ckpt"))


def test_a_pinned_checkpoint_reads_whole_after_its_files_are_removed(tmp_path):
    prefix = _saved(str(tmp_path))
    target = tf.Variable(np.zeros(6, np.float32))
    with pinned(prefix) as held:
        for name in os.listdir(tmp_path):
            if name.startswith(os.path.basename(prefix) + "."):
                os.remove(tmp_path / name)  # the training run's rotation
        tf.train.Checkpoint(v=target).restore(held).assert_consumed()
    np.testing.assert_array_equal(target.numpy(), np.arange(6))
    assert os.listdir(tmp_path) == ["checkpoint"]  # the pin folder is gone too


def test_a_checkpoint_removed_before_it_is_pinned_is_named(tmp_path):
    prefix = _saved(str(tmp_path))
    os.remove(prefix + ".index")
    with pytest.raises(VanishedCheckpoint, match="ckpt-1"):
        with pinned(prefix):
            pass
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".reading-")]


def test_the_pin_folder_of_a_killed_reader_is_removed_by_the_next(tmp_path):
    prefix = _saved(str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    stale = tmp_path / f".reading-{dead}-x"
    stale.mkdir()
    os.link(prefix + ".index", stale / "ckpt-1.index")
    mine = tmp_path / f".reading-{os.getpid()}-y"  # a live reader's: kept
    mine.mkdir()
    with pinned(prefix):
        pass
    assert not stale.exists() and mine.exists()
