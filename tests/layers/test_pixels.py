"""The models' input range: uint8 pixels to [-1, 1], one definition for the input pipeline
and the models."""

import numpy as np

import tfseg.models
from tfseg.layers.pixels import normalize


def test_uint8_pixels_map_onto_minus_one_to_one_in_float32():
    out = np.asarray(normalize(np.array([[0, 51, 255]], np.uint8)))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[-1.0, 51 / 127.5 - 1.0, 1.0]], rtol=1e-6)


def test_the_models_package_exports_the_same_function():
    assert tfseg.models.normalize is normalize
