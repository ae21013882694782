"""A run that cannot write where its flags point (a full or a read-only disk), or that is
refused, says so in one line naming the flag and leaves nothing behind: no lock or claim
file, no folder it made (tfseg/training/lock.py, tfseg/io/claims.py,
tfseg/data/synthetic.py). On real full and read-only disks (tests/disks.py), through the
command in this process."""

import os

import numpy as np
import pytest
from PIL import Image

from tests.disks import FOLDER, KINDS, unwritable
from tests.train.conftest import run_main

# The brief's tiny run: it fails before its first step, so any size is as fast.
TINY = ("--width_multiplier=0.125", "--middle_repeats=1", "--crop_size=33,49",
        "--batch_size=1", "--warmup_steps=0", "--train_steps=2")
REASONS = {"full": "No space left on device", "read_only": "Read-only file system"}


def _tree(folder):
    """Every file and folder under ``folder``, relative to it."""
    return sorted(os.path.relpath(os.path.join(root, name), folder)
                  for root, folders, files in os.walk(folder) for name in folders + files)


def _held(folder):
    """The files under ``folder`` that this process still has open."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # listdir's own descriptor, closed since
            continue
        held += [link] if link.startswith(f"{folder}/") else []
    return held


def _one_line(proc):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr
    return lines[0]


def _args(mode, target, data_dir, model_dir, tmp_path):
    """The command line of ``mode`` writing into ``target``."""
    if mode == "train":
        return ("--mode=train", "--dataset=cityscapes", f"--data_dir={data_dir}",
                f"--model_dir={target}", *TINY)
    if mode == "export":
        return ("--mode=export", f"--model_dir={model_dir}", f"--export_dir={target}")
    image = tmp_path / "frame.png"
    Image.fromarray(np.zeros((40, 56, 3), np.uint8)).save(image)
    return ("--mode=predict", f"--model_dir={model_dir}", f"--input_path={image}",
            f"--output_dir={target}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode,flag,name", [("train", "--model_dir", FOLDER),
                                            ("train", "--model_dir", "new/run"),
                                            ("predict", "--output_dir", "pred"),
                                            ("export", "--export_dir", "exp")])
def test_an_unwritable_output_folder_is_one_line_naming_its_flag_and_leaves_nothing(
        trained, tmp_path, mode, flag, name, kind):
    """The pid written into the lock or claim file is the run's first write: its error
    names the flag and the folder (not a bare "[Errno 28] No space left on device"), and
    the file and the folders made for it are removed."""
    with unwritable(tmp_path / "disk", kind) as disk:
        before, target = _tree(disk), disk / name
        line = _one_line(run_main(*_args(mode, target, *trained, tmp_path), check=False))
        assert line == f"tfseg: error: {flag}: could not write {target}: {REASONS[kind]}"
        assert _tree(disk) == before and _held(disk) == []


@pytest.mark.parametrize("kind", KINDS)
def test_synthetic_data_that_cannot_be_written_is_one_line_naming_data_dir(tmp_path, kind):
    with unwritable(tmp_path / "disk", kind) as disk:
        before, run = _tree(disk), tmp_path / "run"
        line = _one_line(run_main("--mode=train", f"--data_dir={disk / 'data'}",
                                  f"--model_dir={run}", *TINY, check=False))
        assert line == (f"tfseg: error: --data_dir: could not write the synthetic set into "
                        f"{disk / 'data'}: {REASONS[kind]}")
        assert _tree(disk) == before and _held(disk) == []
        assert not run.exists()  # nor the run's lock, nor its folder


def test_a_refused_run_leaves_no_lock_and_no_folder_it_made(tmp_path):
    """A missing data set is found once the run holds --model_dir."""
    existing = tmp_path / "existing"
    existing.mkdir()
    for model_dir in (tmp_path / "new" / "run", existing):
        line = _one_line(run_main("--mode=train", "--dataset=cityscapes",
                                  f"--data_dir={tmp_path / 'nonexist'}",
                                  f"--model_dir={model_dir}", *TINY, check=False))
        assert line.startswith(f"tfseg: error: --data_dir: {tmp_path / 'nonexist'} not found")
    assert sorted(os.listdir(tmp_path)) == ["existing"] and os.listdir(existing) == []

