"""Whole-image, sliding-window and multi-scale inference on a tiny model, in-process."""

import numpy as np
import pytest
import tensorflow as tf

from tfseg.evaluation.inference import InferenceConfig, Predictor, _starts
from tfseg.models import deeplab_v3_plus


@pytest.fixture(scope="module")
def model():
    return deeplab_v3_plus(5, width_multiplier=0.25, middle_repeats=1, dropout=0.0)


@pytest.fixture
def image():
    return tf.constant(np.random.default_rng(0).uniform(-1, 1, (1, 45, 70, 3)), tf.float32)


def test_window_offsets_cover_the_image_and_end_flush():
    assert _starts(10, 20, 5) == [0]
    assert _starts(45, 33, 20) == [0, 12]
    assert _starts(70, 49, 30) == [0, 21]
    assert _starts(100, 40, 30) == [0, 30, 60]


def test_probabilities_have_the_image_size_and_sum_to_one(model, image):
    for config in (InferenceConfig(), InferenceConfig("sliding", (33, 49), (20, 30)),
                   InferenceConfig("multiscale", scales=(0.5, 1.25), flip=True)):
        probs = Predictor(model, config)(image)
        assert probs.shape == (1, 45, 70, 5), config
        np.testing.assert_allclose(tf.reduce_sum(probs, -1), 1.0, atol=1e-5)
        assert Predictor(model, config).classes(image).shape == (1, 45, 70)


def test_one_window_of_the_image_size_is_the_whole_image(model, image):
    whole = Predictor(model)(image)
    sliding = Predictor(model, InferenceConfig("sliding", (45, 70), (45, 70)))(image)
    np.testing.assert_allclose(sliding, whole, atol=1e-6)


def test_one_scale_without_flip_is_the_whole_image(model, image):
    whole = Predictor(model)(image)
    single = Predictor(model, InferenceConfig("multiscale", scales=(1.0,), flip=False))(image)
    np.testing.assert_allclose(single, whole, atol=1e-6)


def test_flip_averages_the_mirrored_prediction(model, image):
    flipped = Predictor(model)(tf.reverse(image, [2]))
    both = Predictor(model, InferenceConfig("multiscale", scales=(1.0,), flip=True))(image)
    expected = (Predictor(model)(image) + tf.reverse(flipped, [2])) / 2
    np.testing.assert_allclose(both, expected, atol=1e-6)
