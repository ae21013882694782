"""`ActivationDense` against an activation followed by a stock `keras.layers.Dense`."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.layers import ActivationDense
from tests.memory.test_patterns import kept_bytes


def models(activation, units=7, dense_activation=None, dtype=None):
    inputs = keras.Input((5, 12), dtype=dtype)
    hidden = keras.layers.Dense(24, name="up")(inputs)
    stock = keras.Model(inputs, keras.layers.Dense(units, activation=dense_activation,
                                                   name="down")(
        keras.layers.Activation(activation, name="act")(hidden)))
    fused = keras.Model(inputs, ActivationDense(units, activation=dense_activation,
                                                input_activation=activation, name="down")(hidden))
    fused.set_weights(stock.get_weights())
    return stock, fused


def step(model, x, upstream):
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(model(x) * upstream)
    grads = tape.gradient(loss, [x, *model.trainable_weights])
    return {"x": grads[0], **{w.path: g for w, g in zip(model.trainable_weights, grads[1:])}}


@pytest.mark.parametrize("activation, dense_activation", [
    ("gelu", None), ("relu", None), ("silu", "tanh")])
def test_outputs_and_gradients_equal_stock_in_float64(float64, activation, dense_activation):
    stock, fused = models(activation, dense_activation=dense_activation)
    x = tf.constant(np.random.RandomState(0).randn(3, 5, 12))
    upstream = tf.constant(np.random.RandomState(1).randn(3, 5, 7))
    np.testing.assert_allclose(fused(x).numpy(), stock(x).numpy(), rtol=1e-13, atol=1e-13)
    expected, got = step(stock, x, upstream), step(fused, x, upstream)
    assert expected.keys() == got.keys()
    for path, g in expected.items():
        np.testing.assert_allclose(got[path].numpy(), g.numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=path)


def test_the_mlp_keeps_one_hidden_tensor_not_two():
    """Dense(24) -> GELU -> Dense: stock keeps GELU's input and the erf terms of its
    gradient, and its output (the second Dense's); the twin keeps the input only."""
    stock, fused = models("gelu")
    x = tf.constant(np.random.RandomState(0).randn(8, 5, 12).astype("float32"))
    hidden = 8 * 5 * 24 * 4
    kept = kept_bytes(fused, x)
    assert hidden <= kept < 2 * hidden
    assert kept_bytes(stock, x) - kept >= 2 * hidden


def test_config_round_trips():
    layer = ActivationDense(4, input_activation="gelu", name="d")
    again = ActivationDense.from_config(layer.get_config())
    assert again.input_activation == "gelu" and again.units == 4
