"""tfseg.deploy.tflite.check: a .tflite that is not whole is refused in one line before
TF's interpreter, which reads it unchecked and crashes on one cut short, opens it."""

import re

import keras
import pytest
import tensorflow as tf

from tfseg.deploy import tflite
from tfseg.errors import InputError


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """A .tflite with 2.4 MB of weights (TF's interpreter crashed on cut copies of it)."""
    model = keras.Sequential([keras.Input((9, 11, 3)), keras.layers.Conv2D(256, 3),
                              keras.layers.Conv2D(256, 3), keras.layers.Conv2D(4, 1)])
    path = tmp_path_factory.mktemp("tflite") / "model.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    return path


def test_a_whole_file_passes(whole):
    tflite.check(str(whole))


@pytest.mark.parametrize("keep", [0.0, 0.001, 0.1, 0.5, 0.9, 0.999, "junk"])
def test_a_file_cut_short_or_of_another_format_is_refused_naming_it(whole, tmp_path, keep):
    data = whole.read_bytes()
    cut = tmp_path / "cut.tflite"
    cut.write_bytes(b"hello world" * 9 if keep == "junk" else data[:int(len(data) * keep)])
    with pytest.raises(InputError) as error:
        tflite.check(str(cut))
    message = str(error.value)
    assert message.startswith(f"--model_path: {cut} is not a whole .tflite file (")
    assert "\n" not in message and message.endswith("export it again")


def test_a_whole_file_damaged_inside_is_one_line_before_any_image(tmp_path):
    """An operator whose input is a tensor the file does not have (written with TF's own
    flatbuffer tools): `check` passes it, and TF's interpreter raised ``RuntimeError:
    Invalid tensor index ...`` at the first image, a traceback, exit 1. It is run once on
    a zero image when opened: one line naming the file, exit 2, nothing written."""
    import numpy as np
    from PIL import Image
    from tensorflow.lite.tools import flatbuffer_utils

    from tests.train.conftest import run_main
    from tfseg.deploy import EXPORTERS, Request, labels, open_model

    tiny = keras.Sequential([keras.Input((None, None, 3)), keras.layers.Conv2D(3, 1)])
    EXPORTERS["tflite"].write(tiny, str(tmp_path), Request(size=(8, 8)))
    labels.write(EXPORTERS["tflite"], str(tmp_path), labels.Labels(
        ("sky", "road", "car"), np.array([[0, 0, 255], [128, 64, 128], [0, 0, 142]], np.uint8)))
    path = tmp_path / "model.tflite"
    model = flatbuffer_utils.read_model(str(path))
    model.subgraphs[0].operators[0].inputs[0] = 99999
    flatbuffer_utils.write_model(model, str(path))
    tflite.check(str(path))  # whole: the check before TF's interpreter opens it passes it
    why = (rf"^--model_path: {path} is a damaged \.tflite file \(it does not run on a zero "
           rf"image: Invalid tensor index 99999 in node inputs\. The subgraph has \d+ "
           rf"tensors\); export it again$")
    with pytest.raises(InputError, match=why):
        open_model(str(path))
    image = tmp_path / "a.png"
    Image.fromarray(np.zeros((12, 10, 3), np.uint8)).save(image)
    proc = run_main("--mode=predict", f"--model_path={path}", f"--input_path={image}",
                    f"--output_dir={tmp_path / 'out'}", check=False)
    # (TF's own lines aside: its interpreter's deprecation warning, XNNPACK's INFO line.)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("tfseg")]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert len(lines) == 1 and re.match(why.replace("^", "^tfseg: error: "), lines[0]), lines
    assert not (tmp_path / "out").exists()


def test_opening_a_file_shows_no_deprecation_lines(whole):
    """TF 2.21's interpreter warned in six lines (its successor is LiteRT's) before every
    prediction's output; tfseg opens it without them."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tflite.interpreter(str(whole)).allocate_tensors()
        tf.lite.Interpreter(model_path=str(whole))  # TF's own still warns: the test can fail
    messages = [str(w.message) for w in caught]
    assert len([m for m in messages if "deprecated" in m]) == 1, messages
