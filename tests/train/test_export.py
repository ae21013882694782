"""--mode=export --export_format=saved_model,keras,tflite,onnx on a tiny trained run: each
file, run by its own runtime (tf.lite.Interpreter, onnxruntime), gives the Keras model's
classes and logits; the quantised .tflite files agree with it on the validation images."""

import glob
import importlib.util
import os
import subprocess

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from tests.extras import needs
from tests.train.conftest import run_main
from tfseg.config import Config
from tfseg.evaluation.inference import InferenceConfig, padded_pass
from tfseg.models import normalize

needs_onnx = needs("export", "onnxruntime", "tf2onnx")
ALL = "saved_model,keras,tflite,onnx" if importlib.util.find_spec("tf2onnx") else \
    "saved_model,keras,tflite"
SIZE = (97, 129)  # odd, and not the training crop


def _config(data_dir, model_dir, **flat):
    return Config.from_flat(dataset="cityscapes", data_dir=data_dir, model_dir=str(model_dir),
                            crop_size=(64, 64), **flat)


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    """(export folder, the Keras model restored from the same checkpoint)."""
    from tfseg.evaluation.loading import load_model

    data_dir, model_dir = trained
    folder = tmp_path_factory.mktemp("export") / "export"
    run_main("--mode=export", f"--model_dir={model_dir}", f"--export_dir={folder}",
             f"--export_format={ALL}", f"--export_size={SIZE[0]},{SIZE[1]}", "--export_logits")
    model = load_model(_config(data_dir, model_dir), log=lambda *a: None).model
    return folder, model


def _images(data_dir, size):
    """A random image and the validation images, resized to ``size``, uint8 [1, H, W, 3]."""
    images = [np.random.RandomState(0).randint(0, 256, (1, *size, 3)).astype(np.uint8)]
    for path in sorted(glob.glob(os.path.join(data_dir, "leftImg8bit", "val", "*", "*.png"))):
        image = Image.open(path).convert("RGB").resize(size[::-1], Image.BILINEAR)
        images.append(np.asarray(image)[None])
    return images


def _keras(model, image):
    # As eval and the exports run it: padded to the run's output stride (16), cropped back.
    logits = padded_pass(lambda x: model(x, training=False), normalize(image),
                         InferenceConfig(size_multiple=16)).numpy()
    return np.argmax(logits, -1).astype(np.int32), logits


def _close(got, expected, classes_share=0.999, logits_rtol=1e-4):
    """Classes equal on ``classes_share`` of the pixels, logits within ``logits_rtol`` of
    the largest logit."""
    (classes, logits), (want_classes, want_logits) = got, expected
    assert classes.dtype == np.int32 and classes.shape == want_classes.shape
    assert np.mean(classes == want_classes) >= classes_share
    if logits_rtol is not None:
        assert np.max(np.abs(logits - want_logits)) <= logits_rtol * np.max(np.abs(want_logits))


@pytest.mark.slow
def test_tflite_float32_gives_the_keras_models_classes_and_logits(trained, exported):
    folder, model = exported
    interpreter = tf.lite.Interpreter(model_path=str(folder / "model.tflite"), num_threads=2)
    runner = interpreter.get_signature_runner("serving_default")
    assert interpreter.get_input_details()[0]["dtype"] == np.uint8
    assert list(interpreter.get_input_details()[0]["shape"]) == [1, *SIZE, 3]
    for image in _images(trained[0], SIZE):
        out = runner(image=image)
        _close((out["classes"], out["logits"]), _keras(model, image))


@needs_onnx
@pytest.mark.slow
def test_onnx_gives_the_keras_models_classes_and_logits_at_any_size(trained, exported):
    import onnxruntime

    folder, model = exported
    session = onnxruntime.InferenceSession(str(folder / "model.onnx"),
                                           providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["image"]
    assert session.get_inputs()[0].shape == [1, "height", "width", 3]
    for size in (SIZE, (64, 96), (33, 47)):
        for image in _images(trained[0], size):
            classes, logits = session.run(["classes", "logits"], {"image": image})
            _close((classes, logits), _keras(model, image))


@pytest.mark.slow
def test_saved_model_and_keras_file_give_the_keras_models_classes(trained, exported):
    import keras

    folder, model = exported
    served = tf.saved_model.load(str(folder / "saved_model")).signatures["serving_default"]
    reloaded = keras.models.load_model(folder / "model.keras")
    for image in _images(trained[0], (64, 96)):
        out = served(image=tf.constant(image))
        expected = _keras(model, image)
        _close((out["classes"].numpy(), out["logits"].numpy()), expected)
        _close(_keras(reloaded, image), expected)


@pytest.mark.slow
def test_quantised_tflite_files_agree_with_the_keras_model(trained, exported, capsys):
    """float16 and dynamic-range int8 agree on >= 99% of the validation pixels and are
    about half and a quarter of the float32 file; full int8 (calibrated on the training
    images) is measured and printed, not bounded (its agreement depends on the model)."""
    from tfseg.deploy import request_of, tflite

    data_dir, model_dir = trained
    _, model = exported
    size = (64, 96)  # the validation images' own size
    sizes, agreement = {}, {}
    for kind in ("none", "float16", "dynamic_int8", "int8"):
        config = _config(data_dir, model_dir, export_size=size, tflite_quantization=kind,
                         calibration_images=4)
        content = tflite.convert(model, request_of(config))
        sizes[kind] = len(content)
        runner = tf.lite.Interpreter(model_content=content).get_signature_runner()
        same = [np.mean(runner(image=image)["classes"] == _keras(model, image)[0])
                for image in _images(data_dir, size)[1:]]
        agreement[kind] = float(np.mean(same))
    with capsys.disabled():
        print(f"\ntflite at {size}: bytes {sizes}, class agreement {agreement}")
    assert agreement["none"] >= 0.999
    assert agreement["float16"] >= 0.99 and agreement["dynamic_int8"] >= 0.99
    assert sizes["float16"] <= 0.55 * sizes["none"]
    assert sizes["dynamic_int8"] <= 0.3 * sizes["none"]
    assert sizes["int8"] <= 0.35 * sizes["none"]  # its activations add scales


def test_export_refuses_an_unknown_format_in_one_line(trained, tmp_path):
    proc = run_main("--mode=export", f"--model_dir={trained[1]}", f"--export_dir={tmp_path}",
                    "--export_format=saved_model,tflit", check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "tfseg: error: --export_format: must be one of saved_model, keras, tflite, onnx, got "
        "'tflit' (did you mean tflite?)")


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["saved_model", "model.onnx", "model.tflite"])
def test_predict_runs_an_exported_model_with_the_runs_classes(trained, exported, entry,
                                                              tmp_path):
    """predict --model_path writes, per image, the exported model's class ids: the Keras
    model's at the image's size (the .tflite: resized to its input size and back)."""
    import tfseg
    from tfseg.deploy.serving import resized

    if entry == "model.onnx" and importlib.util.find_spec("onnxruntime") is None:
        pytest.skip('the export extra is not installed: pip install "tfseg[export]"')
    data_dir, model_dir = trained
    folder, model = exported
    images = tmp_path / "images"
    images.mkdir()
    inputs = {"export_size": _images(data_dir, SIZE)[1], "val_size": _images(data_dir, (64, 96))[2]}
    for name, image in inputs.items():
        Image.fromarray(image[0]).save(images / f"{name}.png")
    written = tfseg.predict(mode="predict", dataset="cityscapes", model_dir=str(model_dir),
                            model_path=str(folder / entry), input_path=str(images),
                            output_dir=str(tmp_path / "out"), output_format="train_ids",
                            log=lambda *a: None)
    assert sorted(os.path.basename(p) for p in written) == ["export_size_label.png",
                                                            "val_size_label.png"]
    for name, image in inputs.items():
        with Image.open(tmp_path / "out" / f"{name}_label.png") as png:
            got = np.asarray(png)
        want = _keras(model, image)[0][0]
        if entry == "model.tflite" and name == "val_size":
            want = _keras(model, resized(image, SIZE))[0]
            want = tf.image.resize(want[..., None], image.shape[1:3], "nearest")[0, ..., 0]
        assert got.shape == image.shape[1:3]
        assert np.mean(got == np.asarray(want)) >= 0.999, (entry, name)


def test_predict_refuses_a_model_path_it_cannot_run_in_one_line(trained, tmp_path):
    image = tmp_path / "a.png"
    Image.fromarray(np.zeros((33, 49, 3), np.uint8)).save(image)
    # A .tflite cut short, as a half-finished copy leaves it: TF's interpreter crashed on
    # it (a segmentation fault, exit 139) before predict checked the file.
    small = keras.Sequential([keras.Input((9, 11, 3)), keras.layers.Conv2D(256, 3),
                              keras.layers.Conv2D(4, 1)])
    whole = tf.lite.TFLiteConverter.from_keras_model(small).convert()
    (tmp_path / "cut.tflite").write_bytes(whole[:len(whole) // 2])
    for path, message in ((tmp_path / "missing.tflite", "no such file or folder"),
                          (tmp_path / "cut.tflite", "is not a whole .tflite file"),
                          (image, "is not an exported model predict runs: onnx, saved_model, tflite"),
                          (tmp_path, "is not an exported model predict runs")):
        proc = run_main("--mode=predict", f"--model_dir={trained[1]}", f"--model_path={path}",
                        f"--input_path={image}", f"--output_dir={tmp_path / 'out'}",
                        check=False)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert lines[0].startswith("tfseg: error: --model_path: ") and message in lines[0]
        assert lines[0].count("--model_path") == 1, lines[0]  # named once, not wrapped
        assert str(path) in lines[0] and not (tmp_path / "out").exists()


def test_a_full_disk_while_the_saved_model_is_written_is_one_line_and_leaves_nothing(
        trained, tmp_path):
    """On a 1 MB tmpfs (a real full disk): TF's variable writer failed with its traceback,
    exit 1. Skipped where this user may not mount."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
                      capture_output=True).returncode != 0:
        pytest.skip("no right to mount a tmpfs here")
    try:
        proc = run_main("--mode=export", f"--model_dir={trained[1]}",
                        f"--export_dir={disk / 'export'}", "--export_format=saved_model",
                        check=False)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert lines[0] == (f"tfseg: error: --export_dir: could not write {disk / 'export'}: "
                            f"No space left on device")
        assert os.listdir(disk) == []  # the staged export removed, nothing filling the disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)
