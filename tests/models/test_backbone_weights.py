"""A --backbone_weights file of another model is one line that says what did not load,
not Keras' message cut at its first line (a real weights file, written here)."""

import re

import keras
import pytest

from tfseg.errors import InputError
from tfseg.models import application_backbone


def test_the_weights_of_another_model_name_the_layer_and_the_reason(tmp_path):
    other = str(tmp_path / "mobilenet.weights.h5")
    keras.applications.MobileNetV2(include_top=False, weights=None,
                                   input_shape=(32, 32, 3)).save_weights(other)
    with pytest.raises(InputError) as error:
        application_backbone("resnet50", weights=other)
    message = str(error.value)
    assert message.startswith(f"backbone weights {other}: not the weights of "
                              f"keras.applications.ResNet50(include_top=False): ")
    assert "\n" not in message and not message.rstrip().endswith(":"), message
    assert "<" not in message, message  # no object repr
    # How many layers, the first of them, and why it did not load.
    assert re.search(r"\d+ layers could not be loaded, the first conv1_conv: Layer "
                     r"'conv1_conv' expected 2 variables, but received \d+", message), message
