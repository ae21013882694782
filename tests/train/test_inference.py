"""Whole-image, sliding-window and multi-scale inference on a tiny model, in-process."""

import numpy as np
import pytest
import tensorflow as tf

from tfseg.data import DataConfig, build_dataset
from tfseg.evaluation.inference import InferenceConfig, Predictor, window_starts
from tfseg.models import deeplab_v3_plus
from tests.data.trees import cityscapes_tree


@pytest.fixture(scope="module")
def model():
    return deeplab_v3_plus(5, width_multiplier=0.25, middle_repeats=1, dropout=0.0)


@pytest.fixture
def image():
    return tf.constant(np.random.default_rng(0).integers(0, 256, (1, 45, 70, 3)), tf.uint8)


def test_window_offsets_cover_the_image_and_end_flush():
    assert window_starts(10, 20, 5) == [0]
    assert window_starts(45, 33, 20) == [0, 12]
    assert window_starts(70, 49, 30) == [0, 21]
    assert window_starts(100, 40, 30) == [0, 30, 60]


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


def _reference_starts(size, window, stride):
    """Window offsets, counted out plainly: every ``stride`` while a window fits short of the
    end, then one flush with the end (0 when the window is larger than ``size``)."""
    starts, y = [], 0
    while y + window < size:
        starts.append(y)
        y += stride
    return starts + [max(size - window, 0)]


def _reference_pass_size(size, multiple, plus_one):
    """The next k * multiple (+ 1) from ``size`` up, by counting."""
    while (size - plus_one) % multiple or size - plus_one <= 0:
        size += 1
    return size


def _reference_sliding(model, pixels, window, stride, multiple=1, plus_one=False):
    """Sliding-window softmax in plain numpy (float64 sums) around the model's forward pass:
    the image normalised to [-1, 1], padded at the bottom and right with 0 up to the
    window; each window padded again with 0 up to the next k * ``multiple`` (+ 1), its
    softmax cropped back to the window, summed where windows overlap and divided by the
    count."""
    image = pixels.astype(np.float64) / 127.5 - 1.0
    height, width = image.shape[1:3]
    full_h, full_w = max(height, window[0]), max(width, window[1])
    padded = np.zeros((1, full_h, full_w, 3))
    padded[:, :height, :width] = image
    run_h, run_w = (_reference_pass_size(n, multiple, plus_one) for n in window)
    total, count = None, np.zeros((full_h, full_w, 1))
    for y in _reference_starts(full_h, window[0], stride[0]):
        for x in _reference_starts(full_w, window[1], stride[1]):
            crop = np.zeros((1, run_h, run_w, 3), np.float32)
            crop[:, :window[0], :window[1]] = padded[:, y:y + window[0], x:x + window[1]]
            logits = np.asarray(model(crop, training=False), np.float64)[0]
            logits = logits[:window[0], :window[1]]
            e = np.exp(logits - logits.max(-1, keepdims=True))
            if total is None:
                total = np.zeros((full_h, full_w, logits.shape[-1]))
            total[y:y + window[0], x:x + window[1]] += e / e.sum(-1, keepdims=True)
            count[y:y + window[0], x:x + window[1]] += 1
    assert count.min() >= 1  # every pixel is in a window
    return (total / count)[:height, :width]


@pytest.fixture(scope="module")
def trained_like_model():
    """A small real model (output stride 16) with non-trivial batch-norm statistics, so
    that padding and borders show in the logits."""
    model = deeplab_v3_plus(4, width_multiplier=0.25, middle_repeats=1, dropout=0.0,
                            output_stride=16)
    rng = np.random.default_rng(1)
    for variable in model.non_trainable_variables:  # moving means and variances
        shape = tuple(variable.shape)
        if "moving_variance" in variable.path:
            variable.assign(rng.uniform(0.5, 2.0, shape).astype(np.float32))
        elif "moving_mean" in variable.path:
            variable.assign(rng.normal(0, 0.2, shape).astype(np.float32))
    return model


@pytest.mark.parametrize("window,stride,multiple,plus_one", [
    ((65, 65), (43, 43), 1, False),     # overlaps, flush ends, each window as it is
    ((65, 65), (43, 43), 16, False),    # each window run at 80x80 (half_pixel, stride 16)
    ((113, 64), (50, 40), 16, True),    # taller than the image; run at 113x81 (align_corners)
    ((97, 129), (97, 129), 1, False)])  # one window: the image
def test_sliding_window_matches_a_numpy_reference_on_an_odd_sized_image(
        trained_like_model, window, stride, multiple, plus_one):
    model = trained_like_model
    pixels = np.random.default_rng(2).integers(0, 256, (1, 97, 129, 3)).astype(np.uint8)
    expected = _reference_sliding(model, pixels, window, stride, multiple, plus_one)
    config = InferenceConfig("sliding", window, stride, size_multiple=multiple,
                             size_plus_one=plus_one)
    probs = Predictor(model, config)(pixels)
    assert probs.shape == (1, 97, 129, 4)
    np.testing.assert_allclose(np.asarray(probs)[0], expected, atol=2e-5)
    if window == (97, 129):
        np.testing.assert_allclose(expected, np.asarray(Predictor(model)(pixels))[0],
                                   atol=2e-5)


def test_pass_sizes_are_the_next_sizes_the_model_maps_exactly():
    half_pixel, align_corners = InferenceConfig(size_multiple=32), InferenceConfig(
        size_multiple=16, size_plus_one=True)
    assert [half_pixel.pass_size(n) for n in (1, 32, 33, 128, 129)] == [32, 32, 64, 128, 160]
    assert [align_corners.pass_size(n) for n in (1, 17, 18, 129, 128)] == [17, 17, 33, 129, 129]
    assert [InferenceConfig().pass_size(n) for n in (1, 97, 129)] == [1, 97, 129]
    for n in range(1, 100):
        assert half_pixel.pass_size(n) == _reference_pass_size(n, 32, False)
        assert align_corners.pass_size(n) == _reference_pass_size(n, 16, True)


def test_whole_and_scaled_passes_are_padded_and_cropped_back(model, image):
    """A 45x70 image at stride 16 runs at 48x80; its probabilities are the padded image's,
    cropped to 45x70; a 0.6 scale (27x42) runs at 32x48."""
    normalised = tf.cast(image, tf.float32) / 127.5 - 1.0
    padded = tf.pad(normalised, [[0, 0], [0, 3], [0, 10], [0, 0]])
    expected = tf.nn.softmax(model(padded, training=False))[:, :45, :70]
    whole = Predictor(model, InferenceConfig(size_multiple=16))(image)
    np.testing.assert_allclose(whole, expected, atol=2e-5)
    scaled = tf.image.resize(normalised, (27, 42), "bilinear")
    run = tf.pad(scaled, [[0, 0], [0, 5], [0, 6], [0, 0]])
    expected = tf.image.resize(tf.nn.softmax(model(run, training=False))[:, :27, :42],
                               (45, 70), "bilinear")
    predictor = Predictor(model, InferenceConfig("multiscale", scales=(0.6,), size_multiple=16))
    np.testing.assert_allclose(predictor(image), expected, atol=2e-5)


def test_eval_and_predict_run_their_passes_at_the_sizes_of_the_runs_model():
    """The pass sizes come from the run: k x output stride for half_pixel resizes (a
    129x129 window runs at 160x160 with stride 32), k x stride + 1 for align_corners
    (research/deeplab's 769 as it is)."""
    from tfseg.config import Config
    from tfseg.evaluation.evaluate import inference_config

    half = inference_config(Config.from_flat(output_stride=32))
    assert (half.size_multiple, half.size_plus_one, half.crop) == (32, False, (129, 129))
    assert half.pass_size(129) == 160 and half.pass_size(128) == 128
    corners = inference_config(Config.from_flat(resize="align_corners"), mode="whole")
    assert (corners.size_multiple, corners.size_plus_one, corners.mode) == (16, True, "whole")
    assert corners.pass_size(769) == 769 and corners.pass_size(768) == 769
