"""main.py --mode=eval / predict / export on a tiny trained run."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from tests.train.conftest import run_main
from tfseg.models import normalize
from tfseg.train.config import RunConfig


@pytest.mark.slow
def test_eval_writes_eval_json(trained):
    """(The sliding and multi-scale modes are tested in-process in test_inference.py.)"""
    data_dir, model_dir = trained
    mode_flags = ("--eval_mode=sliding", "--eval_crop=33,49", "--eval_stride=20,30")
    proc = run_main("--mode=eval", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
                    *mode_flags)
    result = json.load(open(os.path.join(model_dir, "eval", "eval.json")))
    assert 0.0 <= result["miou"] <= 1.0 and 0.0 <= result["pixel_accuracy"] <= 1.0
    assert result["step"] == 6 and result["images"] == 2
    assert result["checkpoint"].endswith("ckpt-6")
    assert result["eval_mode"] == mode_flags[0].split("=")[1]
    assert set(result["per_class_iou"]) >= {"road", "sky", "car"}
    assert "mIoU" in proc.stdout and "sky" in proc.stdout
    rows = open(os.path.join(model_dir, "eval", "confusion.csv")).read().splitlines()
    assert len(rows) == 20  # header + 19 Cityscapes classes
    assert sum(int(v) for row in rows[1:] for v in row.split(",")[1:]) == \
        result["labelled_pixels"]


@pytest.mark.slow
def test_eval_of_a_named_checkpoint(trained):
    data_dir, model_dir = trained
    run_main("--mode=eval", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
             "--checkpoint=ckpt-3")
    result = json.load(open(os.path.join(model_dir, "eval", "eval.json")))
    assert result["step"] == 3


@pytest.mark.slow
def test_predict_writes_label_and_overlay_pngs(trained, tmp_path):
    data_dir, model_dir = trained
    images = os.path.join(data_dir, "leftImg8bit", "val", "synth2")
    run_main("--mode=predict", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
             f"--input_path={images}", f"--output_dir={tmp_path}")
    names = sorted(os.listdir(tmp_path))
    assert len(names) == 4 and sum(n.endswith("_overlay.png") for n in names) == 2
    for name in names:
        with Image.open(tmp_path / name) as png:
            assert png.size == (96, 64) and png.mode == "RGB"


@pytest.mark.slow
def test_exported_saved_model_predicts_like_the_checkpoint(trained, tmp_path):
    data_dir, model_dir = trained
    run_main("--mode=export", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
             f"--export_dir={tmp_path}", "--memory_saving")
    image = np.asarray(Image.open(os.path.join(
        data_dir, "leftImg8bit", "val", "synth2", "synth2_000000_000019_leftImg8bit.png")))
    served = tf.saved_model.load(str(tmp_path / "saved_model")).signatures["serving_default"]
    classes = served(image=tf.constant(image[None]))["classes"].numpy()
    assert classes.shape == (1, 64, 96) and classes.dtype == np.int32

    from tfseg.evaluation.loading import load_model

    config = RunConfig(dataset="cityscapes", data_dir=data_dir, model_dir=model_dir,
                       crop_size=(64, 64), memory_saving=True)  # weights load by path
    model, _, _ = load_model(config, log=lambda *a: None)
    expected = np.argmax(model(normalize(image[None]), training=False), -1)
    np.testing.assert_array_equal(classes, expected)

    import keras

    reloaded = keras.models.load_model(tmp_path / "model.keras")
    np.testing.assert_array_equal(np.argmax(reloaded(normalize(image[None])), -1), expected)
