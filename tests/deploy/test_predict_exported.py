"""--mode=predict --model_path: an exported file runs with the classes it carries, needs no
--model_dir and writes nothing into the current folder nor into the export folder; a
--model_dir given (even the default's path) of other classes, or whose data set has
others, is refused in one line naming both counts."""

import json
import os
import shutil

import numpy as np
import pytest
from PIL import Image

import tfseg
from tests.extras import needs
from tests.train.conftest import run_main
from tfseg.config import Config
from tfseg.errors import InputError
from tfseg.deploy import read_labels
from tfseg.runtime import files

CITYSCAPES = 19  # the trained run's classes (read as "cityscapes")
THREE = dict(class_names=["sky", "road", "car"], palette=[[0, 0, 255], [128, 64, 128],
                                                          [0, 0, 142]])
OTHER = ("give the run it was exported from, or no --model_dir: the file carries its "
         "classes")


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


def refused(model, model_dir, image, out):
    """The one stderr line of a predict of `model` with `model_dir` refused (exit 2)."""
    proc = run_main("--mode=predict", f"--model_path={model}", f"--model_dir={model_dir}",
                    f"--input_path={image}", f"--output_dir={out}", check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    return lines[0]


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
def test_predict_uses_the_files_classes_without_model_dir_and_writes_beside_its_folder(
        exported, elsewhere, entry, tmp_path):
    """It named a runs/synthetic that does not exist, wrote the synthetic data set into
    the current folder, and the predictions under runs/synthetic there. They go beside
    the model's folder (DIR_predictions/NAME), not into it: it may be an export folder."""
    cwd, image = elsewhere
    model = tmp_path / "copy" / entry
    copy = shutil.copytree if entry == "saved_model" else shutil.copy
    model.parent.mkdir()
    copy(exported / entry, model)
    proc = run_main("--mode=predict", f"--model_path={model}", f"--input_path={image}")
    assert os.listdir(cwd) == [] and os.listdir(model.parent) == [entry]
    out = tmp_path / "copy_predictions" / entry
    assert sorted(os.listdir(out)) == ["a_label.png", "a_overlay.png"]
    assert f"running {model} with its own {CITYSCAPES} classes (road, sidewalk, " in proc.stdout
    assert f"no --output_dir: writing beside the folder of --model_path, to {out}" in proc.stdout


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
    assert (f"the classes of --model_path were not checked against --model_dir: {empty} "
            f"has no config.json\n") in proc.stdout


def test_a_model_dir_that_is_not_a_folder_is_refused(exported, elsewhere, tmp_path):
    """A mistyped --model_dir was taken for a run without config.json (exit 0, its check
    skipped); it is refused, and nothing is made."""
    cwd, image = elsewhere
    gone, out = tmp_path / "no_such_run", tmp_path / "out"
    model = exported / "saved_model"
    assert refused(model, gone, image, out) == (
        f"tfseg: error: --model_dir: {gone} is not a folder; give the run --model_path was "
        f"exported from, or no --model_dir (files tfseg exports carry their classes)")
    assert not out.exists() and not gone.exists() and os.listdir(cwd) == []


def test_a_model_dir_of_other_classes_is_refused_naming_both_counts(
        trained, exported, elsewhere, tmp_path):
    cwd, image = elsewhere
    other = tmp_path / "three_classes"
    other.mkdir()
    files.save_config(Config(), str(other), **THREE)
    model = exported / "saved_model"
    assert refused(model, other, image, tmp_path / "out") == (
        f"tfseg: error: --model_dir: {other} has 3 classes (sky, road, car) and --model_path "
        f"{model} {CITYSCAPES} classes (road, sidewalk, building, ...); {OTHER}")
    assert not (tmp_path / "out").exists() and os.listdir(cwd) == []
    # The run it was exported from agrees: no refusal.
    run_main("--mode=predict", f"--model_path={model}", f"--model_dir={trained[1]}",
             f"--input_path={image}", f"--output_dir={tmp_path / 'out'}")


def test_the_defaults_path_given_as_model_dir_is_checked_and_left_out_is_not_read(
        exported, elsewhere, tmp_path):
    """--model_dir=runs/synthetic counted as not given (it is the default's value): a run
    of other classes there was not checked, exit 0. Given, in the command or in Python,
    it is checked; left out, the runs/synthetic in the current folder is not read."""
    cwd, image = elsewhere
    (cwd / "runs" / "synthetic").mkdir(parents=True)
    files.save_config(Config(), "runs/synthetic", **THREE)
    model, out = exported / "saved_model", tmp_path / "out"
    assert refused(model, "runs/synthetic", image, out) == (
        f"tfseg: error: --model_dir: runs/synthetic has 3 classes (sky, road, car) and "
        f"--model_path {model} {CITYSCAPES} classes (road, sidewalk, building, ...); {OTHER}")
    with pytest.raises(InputError, match="^--model_dir: runs/synthetic has 3 classes "):
        tfseg.predict(model_path=str(model), model_dir="runs/synthetic", input_path=str(image),
                      output_dir=str(out), log=lambda _: None)
    assert not out.exists()
    proc = run_main("--mode=predict", f"--model_path={model}", f"--input_path={image}",
                    f"--output_dir={out}")
    assert f"with its own {CITYSCAPES} classes" in proc.stdout and len(os.listdir(out)) == 2
    assert "not checked" not in proc.stdout


def test_a_model_dir_without_recorded_classes_is_checked_by_its_data_set_or_says_not(
        exported, elsewhere, tmp_path):
    """A config.json without class_names skipped the check silently. Its data set's class
    list is compared (VOC's 21: refused); where that cannot be read either (a folder data
    set no longer on disk), one line says the check could not be made."""
    cwd, image = elsewhere
    model, out = exported / "saved_model", tmp_path / "out"
    voc = tmp_path / "voc_run"
    voc.mkdir()
    files.save_config(Config.from_flat(dataset="voc", model_dir=str(voc)), str(voc))
    assert refused(model, voc, image, out) == (
        f"tfseg: error: --model_dir: {voc} records no classes; its data set (voc) has 21 "
        f"classes (background, aeroplane, bicycle, ...) and --model_path {model} {CITYSCAPES} "
        f"classes (road, sidewalk, building, ...); {OTHER}")
    assert not out.exists()
    gone, data = tmp_path / "folder_run", tmp_path / "gone"
    gone.mkdir()
    files.save_config(Config.from_flat(dataset="folder", data_dir=str(data)), str(gone))
    proc = run_main("--mode=predict", f"--model_path={model}", f"--model_dir={gone}",
                    f"--input_path={image}", f"--output_dir={out}")
    assert (f"the classes of --model_path were not checked against --model_dir: {gone} "
            f"records no classes, and those of its data set (folder in {data}) could not "
            f"be read: class list not found: {data / 'classes.txt'} (one class name per "
            f"line)\n") in proc.stdout
    assert len(os.listdir(out)) == 2 and os.listdir(cwd) == [] and not data.exists()


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
    assert os.listdir(cwd) == [] and not os.path.exists(tmp_path / "old_predictions")
    proc = run_main("--mode=predict", f"--model_path={old}", f"--model_dir={trained[1]}",
                    f"--input_path={image}")
    assert f"with the {CITYSCAPES} of {trained[1]}" in proc.stdout
    assert os.listdir(cwd) == []
    assert len(os.listdir(tmp_path / "old_predictions" / "saved_model")) == 2


@pytest.mark.slow  # an export: ~13 s on 2 busy cores
def test_an_overwriting_export_keeps_the_predictions_made_of_its_files(
        trained, exported, elsewhere, tmp_path):
    """predict wrote FILE_predictions into the export folder, and --overwrite deleted them
    with the old export. They go beside the folder now; a folder holding some (an older
    tfseg's) is refused in one line, nothing deleted."""
    _, image = elsewhere
    folder = tmp_path / "export"
    shutil.copytree(exported, folder)
    run_main("--mode=predict", f"--model_path={folder / 'saved_model'}", f"--input_path={image}")
    out = tmp_path / "export_predictions" / "saved_model"
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}
    assert sorted(before) == ["a_label.png", "a_overlay.png"]
    run_main("--mode=export", f"--model_dir={trained[1]}", f"--export_dir={folder}",
             "--export_format=saved_model", "--overwrite")
    assert os.listdir(folder) == ["saved_model"]
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before
    # An older tfseg's predictions inside the folder: kept, and the export refused.
    shutil.copytree(out, folder / "saved_model_predictions")
    proc = run_main("--mode=export", f"--model_dir={trained[1]}", f"--export_dir={folder}",
                    "--export_format=saved_model", "--overwrite", check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0] == (f"tfseg: error: --export_dir: {folder} holds saved_model_predictions, "
                        f"predictions of its saved_model, which --overwrite would delete; "
                        f"move them out of {folder} first")
    assert sorted(os.listdir(folder)) == ["saved_model", "saved_model_predictions"]
    assert len(os.listdir(folder / "saved_model_predictions")) == 2


def _foreign(kind, folder):
    """A model tfseg did not export, of format ``kind``: float32 ``x`` [1,H,W,3] in, float32
    ``y`` out (the .tflite at 8x8)."""
    import tensorflow as tf

    folder.mkdir()
    if kind == "onnx":
        import onnx
        from onnx import TensorProto, helper

        def value(name):
            return helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, None, None, 3])
        graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "foreign",
                                  [value("x")], [value("y")])
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        proto.ir_version = 8
        onnx.save(proto, str(folder / "foreign.onnx"))
        return folder / "foreign.onnx"
    shape = [1, 8, 8, 3] if kind == "tflite" else [1, None, None, 3]
    module = tf.Module()
    module.serve = tf.function(lambda x: {"y": tf.reduce_mean(x, -1)},
                               input_signature=[tf.TensorSpec(shape, tf.float32, name="x")])
    if kind == "tflite":
        converter = tf.lite.TFLiteConverter.from_concrete_functions(
            [module.serve.get_concrete_function()], module)
        (folder / "foreign.tflite").write_bytes(converter.convert())
        return folder / "foreign.tflite"
    tf.saved_model.save(module, str(folder / "sm"), signatures={"serving_default": module.serve})
    return folder / "sm"


@pytest.mark.parametrize("kind", ["saved_model", "tflite", pytest.param("onnx", marks=needs(
    "export", "onnx", "onnxruntime").marks)])
def test_a_model_tfseg_did_not_export_is_one_line_before_any_image(elsewhere, tmp_path, kind):
    """Its input is x, float32, not tfseg's uint8 image: with a --model_dir to take the
    classes from, the SavedModel failed at the first image with a 179-line TypeError, the
    .onnx with onnxruntime's ValueError (exit 1; tfseg.predict raised it), the .tflite
    with a KeyError's 'image'. Refused when opened, naming the file and what tfseg's
    exports take and give."""
    cwd, image = elsewhere
    model, run3, out = _foreign(kind, tmp_path / "foreign"), tmp_path / "run3", tmp_path / "out"
    run3.mkdir()
    files.save_config(Config(), str(run3), **THREE)
    line = refused(model, run3, image, out)
    assert line.startswith(f"tfseg: error: --model_path: {model} is not a model tfseg exported: "
                           f"it takes x: float32 [1,"), line
    assert line.endswith("; predict runs tfseg's exports, which take image: uint8 [1,H,W,3] "
                         "and give classes: int32 [1,H,W] (docs/export.md)"), line
    with pytest.raises(InputError, match=f"^--model_path: {model} is not a model tfseg "):
        tfseg.predict(model_path=str(model), model_dir=str(run3), input_path=str(image),
                      output_dir=str(out), log=lambda _: None)
    assert not out.exists() and os.listdir(cwd) == []


def test_a_file_whose_stored_classes_are_fewer_than_its_outputs_says_to_export_again(
        elsewhere, tmp_path):
    """A 3-class model whose stored labels list 1 class: the line told to give the run it
    was exported from as --model_dir, which was then refused (3 classes against the
    file's 1: "give the run it was exported from, or no --model_dir"), a loop. The
    stored classes are named as the fault; the run the file names is said to be it."""
    import keras

    from tfseg.deploy import EXPORTERS, Request, labels

    cwd, image = elsewhere
    run3, folder, out = tmp_path / "run3", tmp_path / "export", tmp_path / "out"
    run3.mkdir()
    files.save_config(Config(), str(run3), **THREE)
    ones = keras.Sequential([keras.Input((None, None, 3)), keras.layers.Conv2D(3, 1)])
    ones.set_weights([np.zeros((1, 1, 3, 3), np.float32), np.array([0, 1, 0], np.float32)])
    folder.mkdir()
    EXPORTERS["saved_model"].write(ones, str(folder), Request())
    labels.write(EXPORTERS["saved_model"], str(folder), labels.Labels(
        ("sky",), np.array([[0, 0, 255]], np.uint8), run={"model_dir": str(run3)}))
    model = folder / "saved_model"
    proc = run_main("--mode=predict", f"--model_path={model}", f"--input_path={image}",
                    f"--output_dir={out}", check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"tfseg: error: --model_path: {model} gives class 1, beyond the 1 class (sky) its "
        f"tfseg_labels list: its stored classes do not fit its outputs (damaged, or not this "
        f"model's); export it again"], proc.stderr[-2000:]
    assert refused(model, run3, image, out) == (
        f"tfseg: error: --model_dir: {run3} has 3 classes (sky, road, car) and --model_path "
        f"{model} 1 class (sky); the file names this run as the one it was exported from: its "
        f"stored classes or the run's config.json changed since; export it again")
    assert not out.exists() and os.listdir(cwd) == []
