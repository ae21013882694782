"""Whole-image, sliding-window and multi-scale inference on a tiny model, in-process."""

import numpy as np
import pytest
import tensorflow as tf

from tfseg.data import DataConfig, build_dataset
from tfseg.evaluation.inference import InferenceConfig, Predictor, _starts
from tfseg.models import deeplab_v3_plus
from tests.data.trees import cityscapes_tree


@pytest.fixture(scope="module")
def model():
    return deeplab_v3_plus(5, width_multiplier=0.25, middle_repeats=1, dropout=0.0)


@pytest.fixture
def image():
    return tf.constant(np.random.default_rng(0).integers(0, 256, (1, 45, 70, 3)), tf.uint8)


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


def test_eval_batches_are_normalised_inside(model, tmp_path):
    """A real eval batch (uint8, as decoded) gives the model's softmax on ``x / 127.5 - 1``;
    windows smaller than a padded image see padding 0, the normalised mean."""
    cityscapes_tree(tmp_path, split="val", size=(19, 27), n=1)
    (pixels, _), = build_dataset(DataConfig(root=str(tmp_path), split="val", batch_size=1),
                                 training=False)
    assert pixels.dtype == tf.uint8 and pixels.shape == (1, 19, 27, 3)
    expected = tf.nn.softmax(model(tf.cast(pixels, tf.float32) / 127.5 - 1.0, training=False))
    np.testing.assert_allclose(Predictor(model)(pixels), expected, atol=1e-6)
    padded = tf.pad(tf.cast(pixels, tf.float32) / 127.5 - 1.0, [[0, 0], [0, 14], [0, 6], [0, 0]])
    windowed = Predictor(model, InferenceConfig("sliding", (33, 33), (33, 33)))(pixels)
    np.testing.assert_allclose(windowed, tf.nn.softmax(model(padded))[:, :19, :27], atol=1e-6)


def test_float_images_are_refused(model, image):
    """The old input, floats in [-1, 1], would be normalised again into a near-black image."""
    with pytest.raises(TypeError, match="uint8"):
        Predictor(model)(tf.cast(image, tf.float32) / 127.5 - 1.0)
