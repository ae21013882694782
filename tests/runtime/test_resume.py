"""Resuming never starts afresh over a run's checkpoints: a missing or unreadable state
file is rebuilt from the files on disk, a damaged latest checkpoint falls back to the one
before (real checkpoints of a small model, written and damaged here)."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.errors import InputError
from tfseg.runtime import checkpoints, files

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _parts():
    inputs = keras.Input((9, 11, 3))
    outputs = keras.layers.Conv2D(4, 3, name="conv")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(2, name="dense")(outputs))
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    optimizer.build(model.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64)
    return model, optimizer, step


def _ckpts(model_dir, parts, keep=3):
    model, optimizer, step = parts
    return checkpoints.Checkpoints(model, str(model_dir), keep=keep, optimizer=optimizer,
                                   step=step)


@pytest.fixture
def run(tmp_path):
    """A run folder with ckpt-2, 4 and 6; returns (folder, {step: kernel saved there})."""
    parts = _parts()
    ckpts, kernels = _ckpts(tmp_path, parts), {}
    kernel = parts[0].get_layer("conv").kernel
    for step in (2, 4, 6):
        kernel.assign_add(tf.ones_like(kernel))
        parts[2].assign(step)
        ckpts.save(step)
        kernels[step] = kernel.numpy()
    return tmp_path, kernels


def _resume(model_dir):
    """(restored path, step, kernel, log lines) of a fresh run resuming in ``model_dir``."""
    parts, lines = _parts(), []
    path = _ckpts(model_dir, parts).resume(log=lines.append)
    return path, int(parts[2].numpy()), parts[0].get_layer("conv").kernel.numpy(), lines


def _state(model_dir):
    state = tf.train.get_checkpoint_state(str(model_dir))
    return [os.path.basename(p) for p in state.all_model_checkpoint_paths]


@pytest.mark.parametrize("damage", ["garbage", "missing", "empty"])
def test_an_unreadable_state_file_resumes_from_the_newest_checkpoint(run, damage):
    model_dir, kernels = run
    state_file = model_dir / "checkpoint"
    if damage == "missing":
        state_file.unlink()
    else:
        state_file.write_text("garbage\n" if damage == "garbage" else "")
    path, step, kernel, lines = _resume(model_dir)
    assert path == str(model_dir / "ckpt-6") and step == 6
    np.testing.assert_array_equal(kernel, kernels[6])
    assert len(lines) == 1 and "checkpoint is missing or unreadable" in lines[0]
    # Rebuilt: rotation counts the old checkpoints again, and eval finds the latest.
    assert _state(model_dir) == ["ckpt-2", "ckpt-4", "ckpt-6"]
    assert files.find_checkpoint(str(model_dir)) == path


def test_eval_finds_the_newest_checkpoint_without_a_state_file(run):
    model_dir, _ = run
    (model_dir / "checkpoint").write_text("garbage\n")
    assert files.find_checkpoint(str(model_dir)) == str(model_dir / "ckpt-6")


@pytest.mark.parametrize("part", ["index", "data-00000-of-00001"])
def test_a_damaged_latest_checkpoint_falls_back_to_the_one_before(run, part):
    model_dir, kernels = run
    damaged = model_dir / f"ckpt-6.{part}"
    damaged.write_bytes(damaged.read_bytes()[:20])
    path, step, kernel, lines = _resume(model_dir)
    assert path == str(model_dir / "ckpt-4") and step == 4
    np.testing.assert_array_equal(kernel, kernels[4])
    assert len(lines) == 1 and f"checkpoint {model_dir}/ckpt-6 is damaged" in lines[0]
    assert _state(model_dir) == ["ckpt-2", "ckpt-4"]
    assert damaged.exists()  # kept: overwritten only when training reaches step 6 again


def test_rotation_goes_on_after_a_rebuilt_state(run):
    model_dir, _ = run
    (model_dir / "checkpoint").unlink()
    parts = _parts()
    ckpts = _ckpts(model_dir, parts, keep=3)
    ckpts.resume(log=lambda line: None)
    ckpts.save(8)
    assert _state(model_dir) == ["ckpt-4", "ckpt-6", "ckpt-8"]
    assert not (model_dir / "ckpt-2.index").exists()


def test_every_checkpoint_damaged_is_refused_naming_the_folder(run):
    model_dir, _ = run
    for step in (2, 4, 6):
        (model_dir / f"ckpt-{step}.index").write_bytes(b"not an sstable")
    with pytest.raises(InputError, match=f"^--model_dir: every checkpoint in {model_dir} is "
                                         f"damaged or unreadable \\(ckpt-6, ckpt-4, ckpt-2\\)"):
        _resume(model_dir)


@pytest.mark.parametrize("state", [None, "", "garbage\n"])
def test_a_folder_without_checkpoints_starts_afresh_and_saves(tmp_path, state):
    if state is not None:
        (tmp_path / "checkpoint").write_text(state)  # names nothing that exists
    parts = _parts()
    ckpts = _ckpts(tmp_path, parts)
    assert ckpts.resume(log=print) is None
    assert ckpts.save(1) == str(tmp_path / "ckpt-1") and _state(tmp_path) == ["ckpt-1"]


def _limited_save(model_dir, step, limit):
    """Saves ``step`` in a child process whose files may not exceed ``limit`` bytes (a full
    disk, as the writer sees it); returns the child's result."""
    code = f"""
import resource, signal, sys
sys.path.insert(0, {ROOT!r})
from tests.runtime.test_resume import _ckpts, _parts
from tfseg.errors import InputError
ckpts = _ckpts({str(model_dir)!r}, _parts())
ckpts.resume(log=lambda line: None)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails (EFBIG), as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
try:
    ckpts.save({step})
except InputError as error:
    print(error)
"""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))


def test_a_failed_save_is_one_line_removes_its_files_and_keeps_the_latest(run):
    model_dir, kernels = run
    before = sorted(os.listdir(model_dir))
    proc = _limited_save(model_dir, 8, limit=64)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = f"--model_dir: could not save checkpoint 8 in {model_dir} (File too large"
    assert proc.stdout.startswith(line) and proc.stdout.count("\n") == 1, proc.stdout
    assert proc.stdout.strip().endswith(f"; the latest is still {model_dir}/ckpt-6")
    assert sorted(os.listdir(model_dir)) == before  # no ckpt-8_temp, no partial ckpt-8.*
    path, step, kernel, _ = _resume(model_dir)
    assert (path, step) == (str(model_dir / "ckpt-6"), 6)
    np.testing.assert_array_equal(kernel, kernels[6])


def test_a_failed_first_save_says_there_is_no_checkpoint_yet(tmp_path):
    """There is no checkpoint to name as the latest: the line says so."""
    proc = _limited_save(tmp_path, 1, limit=64)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith(f"--model_dir: could not save checkpoint 1 in {tmp_path} (")
    assert proc.stdout.strip().endswith("; there is no checkpoint yet"), proc.stdout
    assert os.listdir(tmp_path) == []


def test_a_checkpoint_the_system_will_not_read_stops_the_run_without_falling_back(run):
    """An I/O error (here a folder where the index goes, as the system would refuse a file
    for EIO, a permission or a stale handle) is no proof of damage: falling back would
    retrain those steps and later overwrite a checkpoint that may be fine."""
    model_dir, _ = run
    index = model_dir / "ckpt-6.index"
    index.unlink()
    index.mkdir()
    state = (model_dir / "checkpoint").read_text()
    with pytest.raises(InputError, match=f"^checkpoint file {index} cannot be read: "
                                         f"Is a directory$"):
        _resume(model_dir)
    assert (model_dir / "checkpoint").read_text() == state


def test_a_state_file_naming_a_checkpoint_of_another_name_resumes_from_it(run):
    """Not tfseg's naming (``ckpt-N``), but a checkpoint all the same: restored, no
    traceback; the ckpt-N files are older."""
    model_dir, kernels = run
    parts = _parts()
    ckpts = _ckpts(model_dir, parts)
    ckpts.restore(str(model_dir / "ckpt-4"))
    ckpts.checkpoint.write(str(model_dir / "model.final"))
    tf.compat.v1.train.update_checkpoint_state(str(model_dir), str(model_dir / "model.final"))
    path, step, kernel, lines = _resume(model_dir)
    assert (path, step, lines) == (str(model_dir / "model.final"), 4, [])
    np.testing.assert_array_equal(kernel, kernels[4])


def test_a_state_file_listing_a_rotated_out_checkpoint_is_rewritten_on_resume(run):
    """A kill between CheckpointManager's first state write and its deletion of the
    oldest checkpoint leaves the state listing that checkpoint, gone."""
    model_dir, kernels = run
    for part in ("index", "data-00000-of-00001"):
        (model_dir / f"ckpt-2.{part}").unlink()
    assert _state(model_dir) == ["ckpt-2", "ckpt-4", "ckpt-6"]
    path, step, kernel, lines = _resume(model_dir)
    assert (path, step, lines) == (str(model_dir / "ckpt-6"), 6, [])
    assert _state(model_dir) == ["ckpt-4", "ckpt-6"]
