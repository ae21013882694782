"""The output-only layer and RMS norms against `keras.layers.LayerNormalization` and
`keras.layers.RMSNormalization`."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.layers import InplaceLayerNormalization, InplaceRMSNormalization
from tests.memory.test_patterns import kept_bytes


def pair(x, rms=False, **kwargs):
    stock = (keras.layers.RMSNormalization if rms else keras.layers.LayerNormalization)(**kwargs)
    twin = (InplaceRMSNormalization if rms else InplaceLayerNormalization)(**kwargs)
    stock.build(x.shape)
    twin.build(x.shape)
    rng = np.random.RandomState(1)
    for w in stock.weights:  # away from 1 and 0, so a swapped gamma and beta would show
        w.assign(rng.uniform(0.5, 2.0, w.shape) * rng.choice([-1, 1], w.shape))
    twin.set_weights(stock.get_weights())
    return stock, twin


def step(layer, x, upstream):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
        loss = tf.reduce_sum(y * upstream)
    return [y, *tape.gradient(loss, [x, *layer.trainable_weights])]


@pytest.mark.parametrize("shape, options", [
    ((3, 7, 13), {}),
    ((2, 5, 9, 6), {"epsilon": 1e-6}),
    ((2, 5, 9, 6), {"axis": [1, 2, 3]}),  # gamma and beta of [5, 9, 6]
    ((3, 7, 13), {"center": False}),
    ((3, 7, 13), {"scale": False}),
    ((3, 7, 13), {"rms": True}),
    ((2, 5, 9, 6), {"rms": True, "axis": [2, 3]}),
])
def test_outputs_and_gradients_equal_stock_in_float64(float64, shape, options):
    x = tf.constant(np.random.RandomState(0).randn(*shape) * 3 + 1)
    upstream = tf.constant(np.random.RandomState(2).randn(*shape))
    stock, twin = pair(x, **options)
    expected, got = step(stock, x, upstream), step(twin, x, upstream)
    np.testing.assert_array_equal(got[0].numpy(), expected[0].numpy())
    for a, b, what in zip(expected[1:], got[1:], ["x", "gamma (scale)", "beta"]):
        scale = float(np.abs(a.numpy()).max())
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-10, atol=1e-12 * scale,
                                   err_msg=what)


def test_float32_and_mixed_precision_match_stock():
    x = tf.constant(np.random.RandomState(0).randn(4, 6, 32).astype("float32"))
    upstream = tf.constant(np.random.RandomState(2).randn(4, 6, 32).astype("float32"))
    stock, twin = pair(x, epsilon=1e-6)
    expected, got = step(stock, x, upstream), step(twin, x, upstream)
    for a, b in zip(expected, got):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-4, atol=1e-4)
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        stock_bf, twin_bf = pair(x, epsilon=1e-6)
    finally:
        keras.config.set_dtype_policy("float32")
    np.testing.assert_array_equal(twin_bf(x).numpy(), stock_bf(x).numpy())


def test_it_keeps_its_output_not_its_input():
    """x -> Dense -> norm -> Dense: stock keeps the norm's input and output (the
    second Dense's input); the twin keeps the output only."""
    def model(norm):
        inputs = keras.Input((16, 64))
        h = keras.layers.Dense(64, name="a")(inputs)
        return keras.Model(inputs, keras.layers.Dense(8, name="b")(norm(name="n")(h)))
    x = tf.constant(np.random.RandomState(0).randn(4, 16, 64).astype("float32"))
    row = 4 * 16 * 64 * 4
    stock, twin = (kept_bytes(model(cls), x) for cls in (keras.layers.LayerNormalization,
                                                          InplaceLayerNormalization))
    assert stock - twin >= row


@pytest.mark.parametrize("rms", [False, True], ids=["layer", "rms"])
def test_a_residual_added_after_the_norm_is_exact_in_float64(float64, rms):
    """y + residual (Swin-V2's x + norm(f(x))): the twin returns the sum and keeps it,
    rebuilding y as sum - residual; gradients of x, residual and the weights as stock's."""
    rng = np.random.RandomState(0)
    x, residual, upstream = (tf.constant(rng.randn(3, 7, 13) * s) for s in (3, 2, 1))
    stock, twin = pair(x, rms=rms)

    def run(call):
        with tf.GradientTape() as tape:
            tape.watch([x, residual])
            y = call()
            loss = tf.reduce_sum(y * upstream)
        return [y, *tape.gradient(loss, [x, residual, *stock.trainable_weights,
                                         *twin.trainable_weights])]

    expected = run(lambda: stock(x) + residual)
    got = run(lambda: twin(x, residual=residual))
    np.testing.assert_allclose(got[0].numpy(), expected[0].numpy(), rtol=1e-15, atol=1e-15)
    weights = len(stock.trainable_weights)
    pairs = list(zip(expected[1:3] + expected[3:3 + weights], got[1:3] + got[3 + weights:]))
    for a, b in pairs:
        scale = float(np.abs(a.numpy()).max())
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-9, atol=1e-11 * scale)


def test_a_folded_residual_keeps_the_sum_not_the_norms_output():
    """x -> Dense -> norm -> + x -> Dense, rewritten: the Add folds into the norm
    (`tfseg.memory.rewrite`), which keeps the sum the next Dense keeps anyway."""
    from tfseg import memory

    inputs = keras.Input((16, 64))
    h = keras.layers.LayerNormalization(name="n")(keras.layers.Dense(64, name="a")(inputs))
    out = keras.layers.Dense(8, name="b")(keras.layers.Add(name="add")([inputs, h]))
    model = keras.Model(inputs, out)
    assert memory.changes(model).residual == [("n", "add")]
    x = tf.constant(np.random.RandomState(0).randn(4, 16, 64).astype("float32"))
    row = 4 * 16 * 64 * 4
    unfolded = memory.rewrite(model, memory.RewriteOptions(fold_residual=False))
    assert kept_bytes(unfolded, x) - kept_bytes(memory.rewrite(model), x) >= row


def test_an_add_in_another_dtype_than_the_norms_is_not_folded():
    """Under mixed_bfloat16 a float32 Add sums in float32; the folded norm would sum in
    bfloat16, so it stays an Add."""
    from tfseg import memory

    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        inputs = keras.Input((16, 64))
        h = keras.layers.LayerNormalization(name="n")(keras.layers.Dense(64, name="a")(inputs))
        out = keras.layers.Add(name="add", dtype="float32")([inputs, h])
        model = keras.Model(inputs, out)
    finally:
        keras.config.set_dtype_policy("float32")
    assert memory.changes(model).residual == []
