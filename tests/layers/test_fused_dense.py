"""`ActivationDense` and `ActivationEinsumDense` against an activation followed by a
stock `keras.layers.Dense` or `EinsumDense`."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg import memory
from tfseg.layers import ActivationDense, ActivationEinsumDense
from tfseg.memory.kept import kept_tensors
from tests.memory.test_patterns import kept_bytes


def models(activation, units=7, dense_activation=None, dtype=None, einsum=False):
    inputs = keras.Input((5, 12), dtype=dtype)
    hidden = keras.layers.Dense(24, name="up")(inputs)
    if einsum:  # heads x head width, as attention's projections write it
        stock_cls, twin_cls = keras.layers.EinsumDense, ActivationEinsumDense
        args = ("abc,cde->abde", (None, 2, units))
        options = dict(bias_axes="de", activation=dense_activation, name="down")
    else:
        stock_cls, twin_cls = keras.layers.Dense, ActivationDense
        args, options = (units,), dict(activation=dense_activation, name="down")
    stock = keras.Model(inputs, stock_cls(*args, **options)(
        keras.layers.Activation(activation, name="act")(hidden)))
    fused = keras.Model(inputs, twin_cls(*args, input_activation=activation, **options)(hidden))
    for w in stock.weights:  # a bias away from zero, so that its place is checked
        w.assign(np.random.RandomState(len(w.path)).uniform(-1, 1, w.shape))
    fused.set_weights(stock.get_weights())
    return stock, fused


def step(model, x, upstream):
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(model(x) * upstream)
    grads = tape.gradient(loss, [x, *model.trainable_weights])
    return {"x": grads[0], **{w.path: g for w, g in zip(model.trainable_weights, grads[1:])}}


@pytest.mark.parametrize("einsum", [False, True], ids=["dense", "einsum_dense"])
@pytest.mark.parametrize("activation, dense_activation", [
    ("gelu", None), ("relu", None), ("silu", "tanh")])
def test_outputs_and_gradients_equal_stock_in_float64(float64, activation, dense_activation,
                                                      einsum):
    stock, fused = models(activation, dense_activation=dense_activation, einsum=einsum)
    x = tf.constant(np.random.RandomState(0).randn(3, 5, 12))
    upstream = tf.constant(np.random.RandomState(1).randn(3, 5, *stock.outputs[0].shape[2:]))
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


def test_a_dropout_between_draws_stocks_mask_from_its_seed_and_keeps_none(float64):
    """GELU -> Dropout (its stateless mask from a seed, as Keras' on TensorFlow) ->
    Dense against `ActivationDense(dropout=(rate, seed))`: the same outputs and
    gradients, and the twin's backward pass keeps the hidden input alone (no mask, no
    dropped map), the seed drawn again there."""
    rate, seed = 0.25, tf.constant([3, 7], tf.int32)
    dense = keras.layers.Dense(7, name="down")
    twin = ActivationDense(7, input_activation="gelu", name="down")
    for layer in (dense, twin):
        layer.build((None, 5, 24))
    twin.set_weights([np.random.RandomState(i).randn(*w.shape) for i, w in
                      enumerate(dense.weights)])
    dense.set_weights(twin.get_weights())
    h = tf.constant(np.random.RandomState(0).randn(3, 5, 24))
    upstream = tf.constant(np.random.RandomState(1).randn(3, 5, 7))

    def stock(h):
        return dense(tf.nn.experimental.stateless_dropout(keras.activations.gelu(h), rate,
                                                          seed=seed))

    def fused(h):
        return twin.call(h, dropout=(rate, seed))

    outputs = {}
    for name, function, layer in (("stock", stock, dense), ("twin", fused, twin)):
        with tf.GradientTape() as tape:
            tape.watch(h)
            y = function(h)
            loss = tf.reduce_sum(y * upstream)
        outputs[name] = (y, *tape.gradient(loss, [h, *layer.trainable_weights]))
    assert np.abs(outputs["twin"][0] - twin.call(h)).max() > 0.1  # the mask drops some
    for got, expected in zip(outputs["twin"], outputs["stock"]):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-12, atol=1e-12)

    @tf.function
    def backward_keeps(h):
        with tf.GradientTape() as tape:
            tape.watch(h)
            loss = tf.reduce_sum(fused(h) * upstream)
        return loss, tape.gradient(loss, h)

    graph = backward_keeps.get_concrete_function(h).graph
    kept = kept_tensors(graph, graph.outputs[0], set())
    assert sum(k.bytes for k in kept) <= 3 * 5 * 24 * 8 + 64  # h, the seed


def test_config_round_trips():
    layer = ActivationDense(4, input_activation="gelu", name="d")
    again = ActivationDense.from_config(layer.get_config())
    assert again.input_activation == "gelu" and again.units == 4


def test_the_rewrite_takes_an_activation_into_the_einsum_dense_after_it(float64):
    stock, _ = models("gelu", einsum=True)
    summary = memory.changes(stock)
    assert summary.fused == [("act", "down")]
    new = memory.rewrite(stock)
    assert isinstance(new.get_layer("down"), ActivationEinsumDense)
    assert "act" not in [layer.name for layer in new.layers]
    x = tf.constant(np.random.RandomState(0).randn(3, 5, 12))
    upstream = tf.constant(np.random.RandomState(1).randn(3, 5, 2, 7))
    expected, got = step(stock, x, upstream), step(new, x, upstream)
    for path, g in expected.items():
        np.testing.assert_allclose(got[path].numpy(), g.numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=path)


def test_the_einsum_dense_keeps_the_hidden_tensor_once():
    stock, fused = models("gelu", einsum=True)
    x = tf.constant(np.random.RandomState(0).randn(8, 5, 12).astype("float32"))
    assert kept_bytes(stock, x) - kept_bytes(fused, x) >= 2 * 8 * 5 * 24 * 4
