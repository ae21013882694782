"""tfseg.deploy.run: int8 calibration reads the training images the run recorded, not the
folder --data_dir's default names."""

import json
import os

from tfseg.config import Config
from tfseg.deploy.run import calibration_images, recorded_data


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
