"""tfseg.deploy.run: int8 calibration reads the training images the run recorded, not the
folder --data_dir's default names, and never writes a data set."""

import json
import os
import shutil

from tests.train.conftest import run_main
from tfseg.config import Config
from tfseg.deploy.run import calibration_data, calibration_images, recorded_data


def test_calibration_reads_the_runs_recorded_data_set_unless_a_flag_names_another(
        data_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where --data_dir's default (a relative folder) points
    saved = json.loads(Config.from_flat(dataset="cityscapes", data_dir=data_dir).to_json())
    flags = Config.from_flat(model_dir=str(tmp_path / "run"))  # no data flags given
    recorded = recorded_data(flags, saved)
    assert (recorded.data.dataset, recorded.data.root) == ("cityscapes", data_dir)
    images = list(calibration_images(recorded, (33, 49), 3)())
    assert len(images) == 3 and all(image.shape == (1, 33, 49, 3) for image in images)
    assert os.listdir(tmp_path) == []  # no data set written into the current folder
    # A data folder given on the command line is the user's choice: kept.
    other = Config.from_flat(model_dir=str(tmp_path / "run"), data_dir=str(tmp_path / "mine"))
    assert recorded_data(other, saved).data.root == str(tmp_path / "mine")
    assert recorded_data(flags, {}) == flags  # a run saved without a config.json


def test_a_relative_recorded_data_folder_is_read_from_where_the_run_was_trained(
        data_dir, tmp_path, monkeypatch):
    """A run started in A with relative folders (the default runs/synthetic and
    data/synthetic), exported from B: its data is A's, not B/data/..., which the
    synthetic reader would write."""
    trained_in = tmp_path / "A"
    shutil.copytree(data_dir, trained_in / "data" / "city")
    (trained_in / "runs" / "try").mkdir(parents=True)
    saved = json.loads(Config.from_flat(dataset="cityscapes", data_dir="data/city",
                                        model_dir="runs/try").to_json())
    elsewhere = tmp_path / "B"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    flags = Config.from_flat(model_dir=str(trained_in / "runs" / "try"))
    data = calibration_data(flags, saved, flags.run.model_dir)
    assert data.data.root == str(trained_in / "data" / "city")
    assert len(list(calibration_images(data, (33, 49), 2)())) == 2
    assert os.listdir(elsewhere) == []


def test_int8_calibration_of_a_synthetic_run_whose_data_is_not_here_is_one_line(
        trained_copy, tmp_path, monkeypatch):
    """The synthetic run's recorded data/synthetic, not found from here (the run was
    moved): refused before the converter starts. It wrote a new synthetic data set into
    the current folder and calibrated on it."""
    _, run = trained_copy
    with open(run / "config.json") as f:
        saved = json.load(f)
    saved["data"].update(dataset="synthetic", root="data/synthetic")
    saved["run"]["model_dir"] = "runs/synthetic"
    with open(run / "config.json", "w") as f:
        json.dump(saved, f)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    proc = run_main("--mode=export", f"--model_dir={run}", "--export_format=tflite",
                    "--tflite_quantization=int8", f"--export_dir={tmp_path / 'out'}",
                    check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0] == ("tfseg: error: --tflite_quantization=int8: calibration reads the "
                        "training images in data/synthetic (as the run's config.json "
                        "records it), which is not a folder here; give --data_dir: the "
                        "folder of the run's data set")
    assert os.listdir(cwd) == [] and not (tmp_path / "out").exists()
