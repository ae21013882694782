"""tfseg.deploy.run: int8 calibration reads the training images the run recorded, and
--export_size's default the size of its evaluation images (else its crop), not those of
the folder --data_dir's default names; neither ever writes a data set."""

import json
import os
import shutil

from tests.train.conftest import run_main
from tfseg.config import Config
from tfseg.deploy.run import (calibration_data, calibration_images, recorded_data,
                              request_of)


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


def test_export_size_defaults_to_the_runs_evaluation_images_else_its_crop(data_dir, tmp_path):
    """The size of the images of the data set the run recorded (64x96 here), else, where
    they are gone, the run's crop: not --crop_size's default (128x128), which it fell back
    to for every run on another folder than --data_dir's default."""
    def size(flags, **recorded):
        saved = json.loads(Config.from_flat(dataset="cityscapes", crop_size=(64, 64),
                                            **recorded).to_json())
        return request_of(flags, log=lambda *a: None, saved=saved).size

    flags = Config.from_flat(model_dir=str(tmp_path / "run"))  # no data flags given
    assert size(flags, data_dir=data_dir) == (64, 96)
    assert size(flags, data_dir=str(tmp_path / "gone")) == (64, 64)
    given = Config.from_flat(model_dir=str(tmp_path / "run"), export_size=(97, 129))
    assert size(given, data_dir=data_dir) == (97, 129)
    assert os.listdir(tmp_path) == []


def test_a_run_on_another_data_folder_exports_at_its_images_size(trained, tmp_path,
                                                                 monkeypatch):
    """Exported without --data_dir, from another folder: the .tflite takes the run's
    validation images as they are (64x96), not 128x128."""
    import tensorflow as tf

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    proc = run_main("--mode=export", f"--model_dir={trained[1]}", "--export_format=tflite",
                    f"--export_dir={tmp_path / 'out'}")
    assert "uint8 image [1,64,96,3]" in proc.stdout, proc.stdout[-2000:]
    interpreter = tf.lite.Interpreter(model_path=str(tmp_path / "out" / "model.tflite"))
    assert list(interpreter.get_input_details()[0]["shape"]) == [1, 64, 96, 3]
    assert os.listdir(cwd) == []
