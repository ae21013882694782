"""--mode=predict --model_path: an exported file runs with the classes it carries, needs no
--model_dir and writes nothing into the current folder; a --model_dir of other classes is
refused in one line naming both counts."""

import json
import os
import shutil

import numpy as np
import pytest
from PIL import Image

from tests.train.conftest import run_main
from tfseg.config import Config
from tfseg.deploy import read_labels
from tfseg.runtime import files

CITYSCAPES = 19  # the trained run's classes (read as "cityscapes")


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    """The trained run's export folder: a SavedModel, model.keras and model.tflite."""
    folder = tmp_path_factory.mktemp("exported") / "export"
    run_main("--mode=export", f"--model_dir={trained[1]}", f"--export_dir={folder}",
             "--export_format=saved_model,keras,tflite", "--export_size=64,64")
    return folder


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """An empty current folder (which must stay empty) and an image outside it."""
    image = tmp_path / "images" / "a.png"
    image.parent.mkdir()
    Image.fromarray(np.random.RandomState(0).randint(0, 256, (40, 56, 3), np.uint8)).save(image)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd, image


def test_every_exported_file_carries_the_runs_classes_and_the_run(trained, exported):
    with open(os.path.join(trained[1], "config.json")) as f:
        saved = json.load(f)
    for entry in ("saved_model", "model.keras", "model.tflite"):
        carried = read_labels(str(exported / entry))
        assert list(carried.class_names) == saved["class_names"], entry
        assert carried.palette.tolist() == saved["palette"] and carried.ignore_label == 255
        assert carried.run["model_dir"] == os.path.abspath(trained[1])
        assert carried.run["checkpoint"] == os.path.join(os.path.abspath(trained[1]), "ckpt-6")
        assert carried.run["step"] == 6 and carried.run["dataset"] == "cityscapes"


@pytest.mark.parametrize("entry", ["saved_model", "model.tflite"])
def test_predict_uses_the_files_classes_without_model_dir_and_writes_beside_it(
        exported, elsewhere, entry, tmp_path):
    """It named a runs/synthetic that does not exist, wrote the synthetic data set into
    the current folder, and the predictions under runs/synthetic there."""
    cwd, image = elsewhere
    model = tmp_path / "copy" / entry
    copy = shutil.copytree if entry == "saved_model" else shutil.copy
    model.parent.mkdir()
    copy(exported / entry, model)
    proc = run_main("--mode=predict", f"--model_path={model}", f"--input_path={image}")
    assert os.listdir(cwd) == []
    out = f"{model}_predictions"
    assert sorted(os.listdir(out)) == ["a_label.png", "a_overlay.png"]
    assert f"running {model} with its own {CITYSCAPES} classes (road, sidewalk, " in proc.stdout
    assert f"no --output_dir: writing beside --model_path, to {out}" in proc.stdout


def test_an_empty_model_dir_is_no_source_of_classes(exported, elsewhere, tmp_path):
    """A --model_dir without config.json: the file's classes (they came from the data set
    that --dataset's default names, written into the current folder)."""
    cwd, image = elsewhere
    empty = tmp_path / "empty_run"
    empty.mkdir()
    proc = run_main("--mode=predict", f"--model_path={exported / 'saved_model'}",
                    f"--model_dir={empty}", f"--input_path={image}",
                    f"--output_dir={tmp_path / 'out'}")
    assert os.listdir(cwd) == [] and len(os.listdir(tmp_path / "out")) == 2
    assert f"with its own {CITYSCAPES} classes" in proc.stdout


def test_a_model_dir_of_other_classes_is_refused_naming_both_counts(
        trained, exported, elsewhere, tmp_path):
    cwd, image = elsewhere
    other = tmp_path / "three_classes"
    other.mkdir()
    files.save_config(Config(), str(other), class_names=["sky", "road", "car"],
                      palette=[[0, 0, 255], [128, 64, 128], [0, 0, 142]])
    model = exported / "saved_model"
    proc = run_main("--mode=predict", f"--model_path={model}", f"--model_dir={other}",
                    f"--input_path={image}", f"--output_dir={tmp_path / 'out'}", check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0] == (f"tfseg: error: --model_dir: {other} has 3 classes (sky, road, car) "
                        f"and --model_path {model} {CITYSCAPES} classes (road, sidewalk, "
                        f"building, ...); give the run it was exported from, or no "
                        f"--model_dir: the file carries its classes")
    assert not (tmp_path / "out").exists() and os.listdir(cwd) == []
    # The run it was exported from agrees: no refusal.
    run_main("--mode=predict", f"--model_path={model}", f"--model_dir={trained[1]}",
             f"--input_path={image}", f"--output_dir={tmp_path / 'out'}")


def test_a_file_exported_before_labels_takes_the_given_runs_or_is_refused(
        trained, exported, elsewhere, tmp_path):
    cwd, image = elsewhere
    old = tmp_path / "old" / "saved_model"
    shutil.copytree(exported / "saved_model", old)
    os.remove(old / "assets" / "tfseg_labels.json")
    proc = run_main("--mode=predict", f"--model_path={old}", f"--input_path={image}",
                    check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0] == (f"tfseg: error: --model_path: {old} carries no classes (exported "
                        f"before tfseg stored them) and no --model_dir was given; give the "
                        f"run it was exported from as --model_dir, or export it again")
    assert os.listdir(cwd) == [] and not os.path.exists(f"{old}_predictions")
    proc = run_main("--mode=predict", f"--model_path={old}", f"--model_dir={trained[1]}",
                    f"--input_path={image}")
    assert f"with the {CITYSCAPES} of {trained[1]}" in proc.stdout
    assert os.listdir(cwd) == [] and len(os.listdir(f"{old}_predictions")) == 2


@pytest.mark.slow  # an export: ~13 s on 2 busy cores
def test_an_overwriting_export_replaces_the_predictions_beside_its_files(
        trained, exported, elsewhere, tmp_path):
    """FILE_predictions, predict's default folder, belongs to the export: --overwrite
    takes the folder (it refused one holding "other files than an export's")."""
    _, image = elsewhere
    folder = tmp_path / "export"
    shutil.copytree(exported, folder)
    run_main("--mode=predict", f"--model_path={folder / 'saved_model'}", f"--input_path={image}")
    assert (folder / "saved_model_predictions").is_dir()
    run_main("--mode=export", f"--model_dir={trained[1]}", f"--export_dir={folder}",
             "--export_format=saved_model", "--overwrite")
    assert os.listdir(folder) == ["saved_model"]
