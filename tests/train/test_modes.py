"""main.py --mode=eval / predict / export / convert on a tiny trained run (in this process,
``tests.command``); a test that writes into the run works on a copy of it."""

import json
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from tests.train.conftest import TINY_FLAGS, restored_step, run_main, scalars
from tfseg.config import Config
from tfseg.data.feed import SKIP_HINT
from tfseg.models import normalize


def test_eval_writes_the_results_of_its_mode(trained_copy):
    """(The sliding and multi-scale modes are tested in-process in test_inference.py.)"""
    data_dir, model_dir = trained_copy
    mode_flags = ("--eval_mode=sliding", "--eval_crop=33,49", "--eval_stride=20,30")
    proc = run_main("--mode=eval", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
                    *mode_flags)
    name = "sliding_33x49_stride20x30"
    result = json.load(open(os.path.join(model_dir, "eval", f"{name}.json")))
    assert 0.0 <= result["miou"] <= 1.0 and 0.0 <= result["pixel_accuracy"] <= 1.0
    assert result["step"] == 6 and result["images"] == 2
    assert result["checkpoint"].endswith("ckpt-6")
    assert result["eval_mode"] == "sliding" and result["result"] == name
    assert result["inference"] == {"mode": "sliding", "window": [33, 49], "stride": [20, 30],
                                   "size_multiple": 16, "size_plus_one": False}
    assert set(result["per_class_iou"]) >= {"road", "sky", "car"}
    assert result["data"] == {"bad_examples": 0, "unknown_label_pixels": 0,
                              "unknown_label_examples": 0}
    assert "bad examples skipped" not in proc.stdout  # said only when not 0
    assert "mIoU" in proc.stdout and "sky" in proc.stdout
    rows = open(os.path.join(model_dir, "eval", f"{name}_confusion.csv")).read().splitlines()
    assert len(rows) == 20  # header + 19 Cityscapes classes
    assert sum(int(v) for row in rows[1:] for v in row.split(",")[1:]) == \
        result["labelled_pixels"]


@pytest.mark.slow
def test_two_eval_modes_of_one_checkpoint_keep_both_results(trained_copy):
    """Whole-image, then multi-scale, then multi-scale at other scales: three files, each
    with its settings, the checkpoint and the time, and a TensorBoard tag each."""
    data_dir, model_dir = trained_copy
    common = ("--mode=eval", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
              "--checkpoint=ckpt-3")
    run_main(*common)
    run_main(*common, "--eval_mode=multiscale", "--eval_scales=0.75,1", "--eval_flip")
    run_main(*common, "--eval_mode=multiscale", "--eval_scales=1.5", "--noeval_flip")
    folder = model_dir / "eval"
    names = ("whole", "multiscale_0.75-1_flip", "multiscale_1.5")
    assert sorted(n for n in os.listdir(folder) if n.endswith(".json")) == \
        sorted(f"{n}.json" for n in names)
    results = {n: json.load(open(folder / f"{n}.json")) for n in names}
    sizes = {"size_multiple": 16, "size_plus_one": False}  # the run's output stride
    assert [results[n]["inference"] for n in names] == [
        {"mode": "whole", **sizes},
        {"mode": "multiscale", "scales": [0.75, 1.0], "flip": True, **sizes},
        {"mode": "multiscale", "scales": [1.5], "flip": False, **sizes}]
    for name, result in results.items():
        assert result["checkpoint"] == f"{model_dir}/ckpt-3" and result["step"] == 3
        assert result["evaluated_at"].endswith("+00:00") and result["result"] == name
        assert (folder / f"{name}_confusion.csv").exists()
        assert scalars(folder, f"miou/{name}") == {3: pytest.approx(result["miou"])}


def test_eval_of_a_named_checkpoint(trained_copy):
    data_dir, model_dir = trained_copy
    run_main("--mode=eval", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
             "--checkpoint=ckpt-3")
    result = json.load(open(os.path.join(model_dir, "eval", "whole.json")))
    assert result["step"] == 3


def test_eval_that_cannot_write_prints_its_metrics_then_one_line(trained, tmp_path):
    """(As root, permissions do not stop a write: a file where the eval folder goes does.)"""
    data_dir, model_dir = trained
    (tmp_path / "eval").write_text("in the way")
    proc = run_main("--mode=eval", f"--data_dir={data_dir}", f"--model_dir={tmp_path}",
                    f"--checkpoint={model_dir}/ckpt-3", check=False)
    assert proc.returncode == 2 and "mIoU" in proc.stdout, proc.stdout[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"tfseg: error: --model_dir: evaluated, but could not write {tmp_path}/eval: "
        f"File exists"], proc.stderr[-2000:]


def test_eval_of_a_missing_data_dir_exits_2_naming_it(trained, tmp_path):
    _, model_dir = trained
    missing = tmp_path / "no_such_dir"
    proc = run_main("--mode=eval", "--dataset=cityscapes", f"--data_dir={missing}",
                    f"--model_dir={tmp_path / 'run'}", f"--checkpoint={model_dir}/ckpt-6",
                    check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfseg: error:"), proc.stderr[-2000:]
    assert "no_such_dir" in lines[0], lines[0]
    assert not (tmp_path / "run" / "eval").exists()


def _recording(run_dir, **sections):
    """Rewrites the config.json of the run in ``run_dir`` to record ``sections``' fields
    ({"data": {"root": ...}, "run": {"model_dir": ...}}); drops the class names where
    ``classes=False``."""
    path = os.path.join(run_dir, "config.json")
    with open(path) as f:
        saved = json.load(f)
    if not sections.pop("classes", True):
        del saved["class_names"], saved["palette"]
    for section, fields in sections.items():
        saved[section].update(fields)
    with open(path, "w") as f:
        json.dump(saved, f)


def test_eval_without_data_dir_reads_the_data_set_the_run_recorded(trained, tmp_path,
                                                                   monkeypatch):
    """A run started in A with a relative data folder, evaluated from B without
    --data_dir: it scores A's data (it took --data_dir's default, data/synthetic: not
    found, exit 2; for a synthetic run it wrote a new data set into B and scored that).
    Recorded but gone: one line naming it and --data_dir, nothing written; --data_dir
    given wins."""
    data_dir, model_dir = trained
    started_in, here = tmp_path / "A", tmp_path / "B"
    shutil.copytree(data_dir, started_in / "data" / "city")
    run = started_in / "runs" / "try"
    shutil.copytree(model_dir, run)
    shutil.rmtree(run / "eval", ignore_errors=True)
    _recording(run, data={"dataset": "cityscapes", "root": "data/city"},
               run={"model_dir": "runs/try"})
    here.mkdir()
    monkeypatch.chdir(here)
    run_main("--mode=eval", f"--model_dir={run}")
    result = json.load(open(run / "eval" / "whole.json"))
    assert result["images"] == 2 and result["dataset"] == "cityscapes"
    assert os.listdir(here) == []
    shutil.rmtree(run / "eval")
    (started_in / "data").rename(started_in / "moved")
    proc = run_main("--mode=eval", f"--model_dir={run}", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"tfseg: error: --data_dir: the run's data set (cityscapes) is in "
        f"{started_in}/data/city, as {run}/config.json records it, which is not a folder "
        f"here; give --data_dir: the folder of the run's data set"]
    assert not (run / "eval").exists() and os.listdir(here) == []
    run_main("--mode=eval", f"--model_dir={run}", f"--data_dir={started_in / 'moved' / 'city'}")
    assert json.load(open(run / "eval" / "whole.json"))["images"] == 2


def test_eval_of_a_synthetic_run_whose_data_is_not_here_writes_no_data_set(
        trained_copy, tmp_path, monkeypatch):
    """A synthetic run on the default data/synthetic, started in a folder it does not
    record (an absolute --model_dir): from another folder, eval wrote a new synthetic
    data set there and scored the model on it, exit 0."""
    _, run = trained_copy
    _recording(run, data={"dataset": "synthetic", "root": "data/synthetic"},
               run={"model_dir": str(run)})
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    proc = run_main("--mode=eval", f"--model_dir={run}", check=False)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"tfseg: error: --data_dir: the run's data set (synthetic) is in data/synthetic, as "
        f"{run}/config.json records it, which is not a folder here; give --data_dir: the "
        f"folder of the run's data set"]
    assert os.listdir(here) == [] and not (run / "eval" / "whole.json").exists()


def test_predict_of_a_run_without_recorded_classes_reads_its_recorded_data_set(
        trained_copy, tmp_path, monkeypatch):
    """A config.json without class names (an older run's): predict takes the classes of
    the data set it records, not of --data_dir's default (data/synthetic: not found,
    exit 2; a synthetic run's written into the current folder)."""
    data_dir, run = trained_copy
    _recording(run, classes=False)
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    image = os.path.join(data_dir, "leftImg8bit", "val", "synth2",
                         "synth2_000000_000019_leftImg8bit.png")
    proc = run_main("--mode=predict", f"--model_dir={run}", f"--input_path={image}",
                    f"--output_dir={tmp_path / 'out'}", "--output_format=label_ids")
    assert "wrote 1 PNGs for 1 image(s)" in proc.stdout  # label_ids: Cityscapes' 19 classes
    assert os.listdir(here) == []


def _no_data_flags(tmp_path):
    """Flags naming a data set that is not there: predict and export must not need it."""
    return "--dataset=cityscapes", f"--data_dir={tmp_path / 'deleted_data'}"


def test_eval_with_a_checkpoint_of_another_run_uses_that_runs_config(trained, tmp_path):
    """--model_dir's config.json describes another architecture; the one beside the
    checkpoint wins."""
    data_dir, model_dir = trained
    other = tmp_path / "other_run"
    other.mkdir()
    (other / "config.json").write_text(
        Config.from_flat(width_multiplier=0.5, middle_repeats=3, dataset="cityscapes").to_json())
    proc = run_main("--mode=eval", f"--data_dir={data_dir}", f"--model_dir={other}",
                    f"--checkpoint={model_dir}/ckpt-3")
    assert f"{model_dir}/config.json" in proc.stdout
    result = json.load(open(other / "eval" / "whole.json"))
    assert result["step"] == 3 and result["checkpoint"] == f"{model_dir}/ckpt-3"


def test_a_checkpoint_of_another_architecture_exits_2_naming_it(trained, tmp_path):
    """Without a config.json beside it, the flags describe the model: here, wrongly."""
    data_dir, model_dir = trained
    for name in os.listdir(model_dir):
        if name.startswith("ckpt-6."):
            shutil.copy(os.path.join(model_dir, name), tmp_path)
    proc = run_main("--mode=eval", f"--data_dir={data_dir}", f"--model_dir={tmp_path}/run",
                    f"--checkpoint={tmp_path}/ckpt-6", "--dataset=cityscapes",
                    "--width_multiplier=0.25", "--middle_repeats=2", check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert lines[0].startswith(f"tfseg: error: checkpoint {tmp_path}/ckpt-6 does not "
                               f"match the model")
    assert "entries missing (e.g. weights/middle_unit2_" in lines[0]


@pytest.mark.parametrize("mode,split", [
    pytest.param("train", "train", marks=pytest.mark.slow),  # 22 s in CI
    ("eval", "val")])
def test_a_corrupt_image_exits_2_naming_it(trained_copy, tmp_path, mode, split):
    data_dir, model_dir = trained_copy
    copy = shutil.copytree(data_dir, tmp_path / "data")
    images = sorted((copy / "leftImg8bit" / split).glob("*/*.png"))
    images[-1].write_bytes(images[-1].read_bytes()[:300])  # truncated
    proc = run_main(f"--mode={mode}", f"--data_dir={copy}", f"--model_dir={model_dir}",
                    "--train_steps=8", *TINY_FLAGS, check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    # Training that stepped before reaching the file saves those steps first.
    line = re.fullmatch(re.escape(f"tfseg: error: cannot read or decode image file "
                                  f"{images[-1]}{SKIP_HINT}")
                        + r"(?:; saved \S+ckpt-(\d+) at step \1: run again to resume)?", lines[0])
    assert line, lines[0]
    if line.group(1):
        assert mode == "train" and restored_step(model_dir) == int(line.group(1)) > 6


def test_predict_writes_label_and_overlay_pngs_without_the_data_set(trained, tmp_path):
    data_dir, model_dir = trained
    images = tmp_path / "images"
    shutil.copytree(os.path.join(data_dir, "leftImg8bit", "val", "synth2"), images)
    out = tmp_path / "out"
    run_main("--mode=predict", *_no_data_flags(tmp_path), f"--model_dir={model_dir}",
             f"--input_path={images}", f"--output_dir={out}")
    assert not (tmp_path / "deleted_data").exists()
    names = sorted(os.listdir(out))
    assert len(names) == 4 and sum(n.endswith("_overlay.png") for n in names) == 2
    palette = {tuple(c) for c in json.load(open(os.path.join(model_dir, "config.json")))["palette"]}
    for name in names:
        with Image.open(out / name) as png:
            assert png.mode == "RGB"
            if name.endswith("_label.png"):  # every pixel is a class colour
                assert png.size == (96, 64)
                assert {tuple(c) for c in np.asarray(png).reshape(-1, 3)} <= palette
            else:  # the image, then the legend's strip (tests/evaluation/test_legend.py)
                assert png.size[0] >= 96 and png.size[1] > 64


@pytest.mark.slow
def test_exported_saved_model_predicts_like_the_checkpoint(trained, tmp_path):
    data_dir, model_dir = trained
    run_main("--mode=export", *_no_data_flags(tmp_path), f"--model_dir={model_dir}",
             f"--export_dir={tmp_path}", "--memory_saving")
    assert not (tmp_path / "deleted_data").exists()
    image = np.asarray(Image.open(os.path.join(
        data_dir, "leftImg8bit", "val", "synth2", "synth2_000000_000019_leftImg8bit.png")))
    served = tf.saved_model.load(str(tmp_path / "saved_model")).signatures["serving_default"]
    classes = served(image=tf.constant(image[None]))["classes"].numpy()
    assert classes.shape == (1, 64, 96) and classes.dtype == np.int32

    from tfseg.evaluation.loading import load_model

    config = Config.from_flat(dataset="cityscapes", data_dir=data_dir, model_dir=model_dir,
                              crop_size=(64, 64), memory_saving=True)  # weights load by path
    model = load_model(config, log=lambda *a: None).model
    expected = np.argmax(model(normalize(image[None]), training=False), -1)
    np.testing.assert_array_equal(classes, expected)

    import keras

    reloaded = keras.models.load_model(tmp_path / "model.keras")
    np.testing.assert_array_equal(np.argmax(reloaded(normalize(image[None])), -1), expected)


def test_convert_writes_its_counts_with_thousands_separators(tmp_path):
    """As every other data message does: 1,200, not 1200."""
    from tests.data.trees import cityscapes_tree

    for split in ("train", "val"):  # half of each label an id Cityscapes does not have
        cityscapes_tree(str(tmp_path / "data"), split, ids=(7, 250), size=(40, 60), n=1)
    proc = run_main("--mode=convert", "--dataset=cityscapes", f"--data_dir={tmp_path / 'data'}",
                    f"--tfrecord_dir={tmp_path / 'records'}")
    assert "(0 bad pairs skipped, 1,200 unknown label pixels mapped to 255)" in proc.stdout

@pytest.mark.slow
def test_convert_writes_shards_that_train_reads(tmp_path, data_dir):
    """--mode=convert writes both splits; the shards hold what the PNG pipeline reads,
    and --dataset=tfrecord trains from them."""
    from tfseg.data import DataConfig, build_dataset

    out = str(tmp_path / "records")
    proc = run_main("--mode=convert", "--dataset=cityscapes", f"--data_dir={data_dir}",
                    f"--tfrecord_dir={out}", "--tfrecord_shards=3")
    assert "train: 6 pairs -> 3 shards" in proc.stdout and "val: 2 pairs -> 2 shards" in proc.stdout
    assert "(0 bad pairs skipped, 0 unknown label pixels mapped to 255)" in proc.stdout
    for split in ("train", "val"):
        png = build_dataset(DataConfig(dataset="cityscapes", root=data_dir, split=split,
                                       batch_size=1), False)
        rec = build_dataset(DataConfig(dataset="tfrecord", root=out, split=split, batch_size=1),
                            False)
        pairs = list(zip(png, rec, strict=True))
        assert len(pairs) == (6 if split == "train" else 2)
        for (image, label), (image2, label2) in pairs:
            np.testing.assert_array_equal(image.numpy(), image2.numpy())
            np.testing.assert_array_equal(label.numpy(), label2.numpy())
    model_dir = str(tmp_path / "run")
    flags = [f for f in TINY_FLAGS if not f.startswith("--dataset")]
    run_main("--mode=train", "--dataset=tfrecord", f"--data_dir={out}", f"--model_dir={model_dir}",
             "--train_steps=2", "--checkpoint_every=2", *flags)
    assert tf.train.latest_checkpoint(model_dir).endswith("ckpt-2")
