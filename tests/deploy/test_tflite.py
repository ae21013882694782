"""tfseg.deploy.tflite.check: a .tflite that is not whole is refused in one line before
TF's interpreter, which reads it unchecked and crashes on one cut short, opens it."""

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
