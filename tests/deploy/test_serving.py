"""What every format computes, and a converter's failure as one line naming the format
and the op (real converters on a one-op "model" they cannot hold)."""


import numpy as np
import pytest
import tensorflow as tf

from tests.extras import needs
from tfseg.deploy import Request, frozen_function, serving_function, tflite
from tfseg.errors import InputError


def _igamma(x, training=False):
    """A 'model' of an op neither TFLite's built-ins nor ONNX have (two 'classes')."""
    return tf.concat([tf.math.igamma(x[..., :1] + 2.0, x[..., 1:] + 2.0)] * 2, -1)


def _scaled(x, training=False):
    return tf.concat([x[..., :1], 0.5 * x[..., 1:2]], -1)


def test_serving_function_takes_uint8_and_gives_int32_classes_and_logits():
    image = np.random.RandomState(0).randint(0, 256, (1, 5, 7, 3)).astype(np.uint8)
    out = serving_function(_scaled, [1, None, None, 3], logits=True)(tf.constant(image))
    x = image.astype(np.float32) / 127.5 - 1  # the normalisation is inside
    expected = np.stack([x[..., 0], 0.5 * x[..., 1]], -1)
    np.testing.assert_allclose(out["logits"], expected, atol=1e-6)
    np.testing.assert_array_equal(out["classes"], np.argmax(expected, -1))
    assert out["classes"].dtype == tf.int32
    assert set(serving_function(_scaled, [1, 5, 7, 3])(tf.constant(image))) == {"classes"}


def test_frozen_function_keeps_the_output_names_and_the_weights():
    dense = tf.keras.layers.Dense(3)
    dense.build([None, 3])
    frozen = frozen_function(lambda x, training: dense(x), [1, 2, 2, 3], logits=True)
    assert not frozen.get_concrete_function().variables
    image = tf.constant(np.arange(12, dtype=np.uint8).reshape(1, 2, 2, 3))
    np.testing.assert_allclose(frozen(image)["logits"],
                               dense(tf.cast(image, tf.float32) / 127.5 - 1), rtol=1e-6)


def test_a_tflite_converter_failure_names_the_format_and_the_op():
    with pytest.raises(InputError) as error:
        tflite.convert(_igamma, Request(size=(5, 7)))
    assert str(error.value) == ("--export_format=tflite: the converter failed on op "
                                "tf.Igamma: 'tf.Igamma' op is neither a custom op nor a flex op")


@needs("export", "tf2onnx", "onnxruntime")
def test_an_onnx_converter_failure_names_the_format_and_the_op(tmp_path):
    from tfseg.deploy import onnx

    with pytest.raises(InputError) as error:
        onnx.convert(_igamma, Request(size=(5, 7)), str(tmp_path / "model.onnx"))
    assert str(error.value) == ("--export_format=onnx: the converter failed on op Igamma: "
                                "No Op registered for Igamma with domain_version of 13")
    assert not (tmp_path / "model.onnx").exists()
