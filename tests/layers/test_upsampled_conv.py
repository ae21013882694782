"""`UpsampledConv2D` against a stock `UpSampling2D` followed by a 1x1 `Conv2D`."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.layers import UpsampledConv2D
from tests.memory.test_patterns import kept_bytes


def models(size, interpolation, use_bias=True, activation=None, shape=(7, 9, 6)):
    inputs = keras.Input(shape)
    up = keras.layers.UpSampling2D(size, interpolation=interpolation, name="up")(inputs)
    stock = keras.Model(inputs, keras.layers.Conv2D(
        5, 1, use_bias=use_bias, activation=activation, name="head")(up))
    twin = keras.Model(inputs, UpsampledConv2D(
        5, 1, use_bias=use_bias, activation=activation, input_upsampling=size,
        input_interpolation=interpolation, name="head")(inputs))
    for w in stock.weights:  # a bias away from zero, so that its place is checked
        w.assign(np.random.RandomState(len(w.path)).uniform(-1, 1, w.shape))
    twin.set_weights(stock.get_weights())
    return stock, twin


def step(model, x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = model(x)
        loss = tf.reduce_sum(tf.sin(out))  # a gradient that differs from pixel to pixel
    grads = tape.gradient(loss, [x, *model.trainable_weights])
    return out, {"x": grads[0], **{w.path: g for w, g in zip(model.trainable_weights, grads[1:])}}


@pytest.mark.parametrize("size, interpolation, use_bias, activation", [
    ((4, 4), "bilinear", True, None), ((2, 3), "bilinear", False, "relu"),
    ((3, 2), "nearest", True, "tanh")])
def test_outputs_and_gradients_equal_stock_in_float64(float64, size, interpolation, use_bias,
                                                      activation):
    """TF's bilinear resize computes in float32 whatever the dtype, so there the two
    orders agree to float32's precision; nearest is a copy, so float64's."""
    stock, twin = models(size, interpolation, use_bias, activation)
    x = tf.constant(np.random.RandomState(0).randn(2, 7, 9, 6))
    (expected, grads), (got, twin_grads) = step(stock, x), step(twin, x)
    tol = 1e-6 if interpolation == "bilinear" else 1e-12
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=tol, atol=tol)
    assert grads.keys() == twin_grads.keys()
    for path, g in grads.items():
        scale = float(np.abs(g.numpy()).max())
        np.testing.assert_allclose(twin_grads[path].numpy(), g.numpy(), rtol=tol,
                                   atol=tol * scale, err_msg=path)


def test_it_keeps_the_small_map_not_the_upsampled_one():
    stock, twin = models((4, 4), "bilinear", shape=(9, 11, 16))
    x = tf.constant(np.random.RandomState(0).randn(2, 9, 11, 16).astype("float32"))
    upsampled, small = 2 * 36 * 44 * 16 * 4, 2 * 9 * 11 * 16 * 4
    assert kept_bytes(stock, x) - kept_bytes(twin, x) >= upsampled - small


def test_it_refuses_what_does_not_commute_and_its_config_round_trips():
    with pytest.raises(ValueError, match="1x1, stride 1"):
        UpsampledConv2D(4, 3, name="c")
    with pytest.raises(ValueError, match="input_interpolation 'bicubic'"):
        UpsampledConv2D(4, 1, input_interpolation="bicubic", name="c")
    layer = UpsampledConv2D(4, 1, input_upsampling=(2, 3), input_interpolation="nearest")
    again = UpsampledConv2D.from_config(layer.get_config())
    assert again.input_upsampling == (2, 3) and again.input_interpolation == "nearest"
