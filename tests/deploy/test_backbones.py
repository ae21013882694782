"""A model on a keras.applications backbone exports too: its .tflite and .onnx give the
Keras model's classes and logits (random weights, MobileNetV2, odd sizes)."""


import numpy as np
import pytest

from tests.extras import needs
from tfseg.config import Config
from tfseg.deploy import Request, tflite
from tfseg.models import normalize
from tfseg.runtime import builders


@pytest.fixture(scope="module")
def mobilenet():
    config = Config.from_flat(backbone="mobilenetv2", width_multiplier=0.125)
    return builders.model(config, num_classes=5)


def _keras(model, image):
    logits = model(normalize(image), training=False).numpy()
    return np.argmax(logits, -1), logits


def _image(size):
    return np.random.RandomState(0).randint(0, 256, (1, *size, 3)).astype(np.uint8)


@pytest.mark.slow
def test_mobilenet_tflite_matches_keras(mobilenet):
    import tensorflow as tf

    image = _image((65, 97))
    content = tflite.convert(mobilenet, Request(size=(65, 97), logits=True))
    out = tf.lite.Interpreter(model_content=content).get_signature_runner()(image=image)
    classes, logits = _keras(mobilenet, image)
    assert np.mean(out["classes"] == classes) >= 0.999
    assert np.max(np.abs(out["logits"] - logits)) <= 1e-4 * np.max(np.abs(logits))


@pytest.mark.slow
@needs("export", "tf2onnx", "onnxruntime")
def test_mobilenet_onnx_matches_keras_at_any_size(mobilenet, tmp_path):
    import onnxruntime

    from tfseg.deploy import onnx

    onnx.convert(mobilenet, Request(logits=True), str(tmp_path / "model.onnx"))
    session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"),
                                           providers=["CPUExecutionProvider"])
    for size in ((65, 97), (33, 47)):
        image = _image(size)
        got_classes, got_logits = session.run(["classes", "logits"], {"image": image})
        classes, logits = _keras(mobilenet, image)
        assert np.mean(got_classes == classes) >= 0.999
        assert np.max(np.abs(got_logits - logits)) <= 1e-4 * np.max(np.abs(logits))
