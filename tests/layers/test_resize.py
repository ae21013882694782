import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.layers import ResizeLike


def run(layer, x, size):
    reference = tf.zeros((x.shape[0], *size, 1))
    return layer([tf.constant(x), reference]).numpy()


@pytest.mark.parametrize("shape,size", [
    ((2, 9, 13, 5), (33, 49)),  # research/deeplab's k * stride + 1 sizes
    ((1, 7, 9, 3), (97, 129)),
    ((1, 25, 33, 4), (97, 129)),  # decoder-like: stride 4 -> 1
    ((2, 13, 17, 3), (7, 5)),  # down
    ((1, 1, 1, 8), (6, 11)),  # the image-pooling branch
])
def test_align_corners_is_tf1_resize_bilinear_exactly(shape, size):
    x = np.random.RandomState(0).randn(*shape).astype("float32")
    expected = tf.compat.v1.image.resize_bilinear(x, size, align_corners=True).numpy()
    np.testing.assert_array_equal(run(ResizeLike(align_corners=True), x, size), expected)
    half_pixel = run(ResizeLike(), x, size)
    np.testing.assert_array_equal(half_pixel, tf.image.resize(x, size, "bilinear").numpy())
    if shape[1:3] != (1, 1):  # from 1x1 both conventions broadcast
        assert np.abs(half_pixel - expected).max() > 1e-3


def test_align_corners_keeps_the_corners_and_survives_config_and_dtype():
    x = np.random.RandomState(1).randn(1, 5, 7, 2).astype("float32")
    layer = ResizeLike(align_corners=True, dtype="float32")
    out = run(layer, x, (17, 25))
    for i, j in [(0, 0), (-1, 0), (0, -1), (-1, -1)]:
        np.testing.assert_array_equal(out[0, i, j], x[0, i, j])
    clone = ResizeLike.from_config(layer.get_config())
    assert clone.align_corners is True and ResizeLike().get_config()["align_corners"] is False
    np.testing.assert_array_equal(run(clone, x, (17, 25)), out)
    # A config saved before the option (no key) is the half-pixel layer.
    old = {k: v for k, v in ResizeLike().get_config().items() if k != "align_corners"}
    assert ResizeLike.from_config(old).align_corners is False


def test_align_corners_has_the_tf1_gradient_in_a_model_under_mixed_precision(mixed_bfloat16):
    x = keras.Input((None, None, 3))
    ref = keras.Input((None, None, 1))
    model = keras.Model([x, ref], ResizeLike(align_corners=True, dtype="float32")([x, ref]))
    value = tf.constant(np.random.RandomState(2).randn(1, 4, 6, 3).astype("float32"))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(value)
        ours = model([value, tf.zeros((1, 13, 21, 1))])
        theirs = tf.compat.v1.image.resize_bilinear(value, (13, 21), align_corners=True)
    assert ours.dtype == tf.float32 and ours.shape == (1, 13, 21, 3)
    np.testing.assert_allclose(tape.gradient(ours, value).numpy(),
                               tape.gradient(theirs, value).numpy(), rtol=1e-6)
