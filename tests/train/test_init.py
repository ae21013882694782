"""main.py --init_checkpoint: a research/deeplab-layout checkpoint (written here from a small
tfseg model under the reference's names) exported, evaluated and fine-tuned from."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from tests.models.test_research_deeplab import arrays_of, write_tf1_checkpoint
from tests.train.conftest import restored_step, run_main
from tfseg.evaluation.inference import InferenceConfig, padded_pass
from tfseg.models import REFERENCE_CONVENTIONS, deeplab_v3_plus, normalize

# Not TINY_FLAGS: the width and middle units are left to the checkpoint.
FLAGS = ("--dataset=cityscapes", "--crop_size=64,64", "--batch_size=2", "--warmup_steps=0",
         "--log_every=1", "--learning_rate=0.01", "--seed=0")


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """(checkpoint prefix, source model): 19 classes, width 0.25, 1 middle unit, the
    reference's conventions, weights and statistics away from their initial values."""
    # Whatever ran before in this worker: a seed whose model gives several classes on
    # _image (most give one class everywhere, which would hide a shifted pass).
    keras.utils.set_random_seed(9)
    model = deeplab_v3_plus(19, width_multiplier=0.25, middle_repeats=1,
                            **REFERENCE_CONVENTIONS)
    rng = np.random.RandomState(1)
    for w in model.weights:
        value = w.numpy() * rng.uniform(0.5, 1.5, w.shape)
        w.assign((value + (0 if "variance" in w.path else rng.normal(0, .05, w.shape)))
                 .astype("float32"))
    arrays = {**arrays_of(model), "global_step": np.int64(30000)}
    prefix = write_tf1_checkpoint(tmp_path_factory.mktemp("zoo") / "model.ckpt", arrays)
    return prefix, model


def _classes(model, image):
    """The source model's classes of ``image`` [H, W, 3] as eval and the exports run it:
    padded to a size an align_corners model maps exactly (16k + 1), cropped back."""
    sizes = InferenceConfig(size_multiple=16, size_plus_one=True)
    logits = padded_pass(lambda x: model(x, training=False), normalize(image[None]), sizes)
    return np.argmax(logits[0], -1)


def _image(data_dir):
    return np.asarray(Image.open(os.path.join(
        data_dir, "leftImg8bit", "val", "synth2", "synth2_000000_000019_leftImg8bit.png")))


@pytest.mark.slow
def test_export_of_an_imported_checkpoint_predicts_like_the_reference_model(
        zoo, data_dir, tmp_path):
    prefix, model = zoo
    proc = run_main("--mode=export", f"--init_checkpoint={prefix}", f"--data_dir={data_dir}",
                    f"--model_dir={tmp_path / 'run'}", f"--export_dir={tmp_path}", *FLAGS)
    assert ("--init_checkpoint: settings from the research/deeplab checkpoint "
            f"{prefix}: {{'middle_repeats': 1, 'head_epsilon': 1e-05, "
            "'resize': 'align_corners'}") in proc.stdout, proc.stdout
    assert f"initialised from research/deeplab checkpoint {prefix}: loaded " in proc.stdout
    image = _image(data_dir)
    served = tf.saved_model.load(str(tmp_path / "saved_model")).signatures["serving_default"]
    classes = served(image=tf.constant(image[None]))["classes"].numpy()
    expected = _classes(model, image)
    assert len(np.unique(expected)) >= 3
    np.testing.assert_array_equal(classes[0], expected)
    # The logits too (the classes alone could hide a wrong model behind one big bias).
    reloaded = keras.models.load_model(tmp_path / "model.keras")
    np.testing.assert_allclose(reloaded(normalize(image[None])),
                               model(normalize(image[None]), training=False), atol=1e-4)


@pytest.mark.slow
def test_fine_tuning_from_an_imported_checkpoint_records_its_conventions(
        zoo, data_dir, tmp_path):
    prefix, _ = zoo
    common = ("--mode=train", f"--data_dir={data_dir}", f"--model_dir={tmp_path}",
              f"--init_checkpoint={prefix}", "--checkpoint_every=2", *FLAGS)
    first = run_main("--train_steps=2", *common)
    assert f"; from the weights of {prefix}" in first.stdout, first.stdout[-2000:]
    assert restored_step(tmp_path) == 2
    saved = json.load(open(tmp_path / "config.json"))
    assert saved["model"]["head_epsilon"] == 1e-5 and saved["model"]["resize"] == "align_corners"
    assert saved["model"]["middle_repeats"] == 1 and saved["run"]["init_checkpoint"] == prefix
    # The run's own checkpoint wins over --init_checkpoint: a resume.
    second = run_main("--train_steps=3", *common)
    assert f"resumed from {tmp_path}/ckpt-2 at step 2" in second.stdout
    assert "initialised from" not in second.stdout
    # Eval without the flags rebuilds the trained model: conventions from its config.json.
    proc = run_main("--mode=eval", f"--data_dir={data_dir}", f"--model_dir={tmp_path}",
                    "--dataset=cityscapes")
    assert "'head_epsilon': 1e-05, 'resize': 'align_corners'" in proc.stdout, proc.stdout
    assert json.load(open(tmp_path / "eval" / "whole.json"))["step"] == 3


def test_eval_of_an_imported_checkpoint(zoo, data_dir, tmp_path):
    prefix, _ = zoo
    run_main("--mode=eval", f"--init_checkpoint={os.path.dirname(prefix)}",  # its folder
             f"--data_dir={data_dir}", f"--model_dir={tmp_path}", *FLAGS)
    result = json.load(open(tmp_path / "eval" / "whole.json"))
    assert result["checkpoint"] == prefix and 0 <= result["miou"] <= 1


@pytest.mark.parametrize("case", ["missing", "garbage", "conflicting flag"])
def test_a_bad_init_checkpoint_is_one_line_naming_it(zoo, data_dir, tmp_path, case):
    prefix, _ = zoo
    path, extra = prefix, ("--middle_repeats=3",)
    if case == "missing":
        path, extra = str(tmp_path / "nothing" / "model.ckpt"), ()
    elif case == "garbage":
        path, extra = str(tmp_path / "model.ckpt"), ()
        (tmp_path / "model.ckpt.index").write_bytes(b"not an sstable")
    proc = run_main("--mode=eval", f"--init_checkpoint={path}", f"--data_dir={data_dir}",
                    f"--model_dir={tmp_path / 'run'}", *FLAGS, *extra, check=False)
    lines = [line for line in proc.stderr.strip().splitlines()
             if line.startswith("tfseg:")]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert path in lines[0] and "Traceback" not in proc.stderr
    if case == "conflicting flag":  # --middle_repeats given: it wins, and cannot load
        assert "middle" in lines[0], lines[0]


def test_predict_with_an_imported_checkpoint_colours_the_reference_models_classes(
        zoo, data_dir, tmp_path):
    from tfseg.data import cityscapes

    prefix, model = zoo
    images = tmp_path / "images"
    images.mkdir()
    Image.fromarray(_image(data_dir)).save(images / "frame.png")
    run_main("--mode=predict", f"--init_checkpoint={prefix}", f"--data_dir={data_dir}",
             f"--model_dir={tmp_path / 'run'}", f"--input_path={images}",
             f"--output_dir={tmp_path / 'out'}", *FLAGS)
    expected = _classes(model, _image(data_dir))
    label = np.asarray(Image.open(tmp_path / "out" / "frame_label.png").convert("RGB"))
    np.testing.assert_array_equal(label, cityscapes.PALETTE[expected])
