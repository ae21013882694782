"""`LeanMultiHeadAttention` against `keras.layers.MultiHeadAttention`."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.layers import LeanMultiHeadAttention, lean_attention
from tests.memory.test_patterns import kept_bytes


def models(cls, tokens=9, keys=7, width=12, heads=3, mask=False, key_dim=4, **options):
    query, value = keras.Input((tokens, width)), keras.Input((keys, width))
    kwargs = {}
    if mask:  # query i sees the first i keys: the first sees none (a padded query)
        kwargs["attention_mask"] = np.tril(np.ones((tokens, keys), bool), -1)[None]
    out = cls(heads, key_dim, name="attention", **options)(query, value, **kwargs)
    return keras.Model([query, value], out)


def pair(**options):
    stock = models(keras.layers.MultiHeadAttention, **options)
    lean = models(LeanMultiHeadAttention, **options)
    lean.set_weights(stock.get_weights())
    return stock, lean


def step(model, inputs, upstream, training=True):
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        loss = tf.reduce_sum(model(inputs, training=training) * upstream)
    grads = tape.gradient(loss, [*inputs, *model.trainable_weights])
    return loss, {"query": grads[0], "value": grads[1],
                  **{w.path: g for w, g in zip(model.trainable_weights, grads[2:])}}


# key_dim 3: a scale of 1 / sqrt(3), which float32 does not hold exactly.
@pytest.mark.parametrize("options", [{}, {"mask": True}, {"value_dim": 5}, {"key_dim": 3},
                                     {"dropout": 0.5, "training": False},
                                     {"dropout": 0.5, "mask": True, "training": False}])
def test_outputs_and_gradients_equal_stock_in_float64(float64, options):
    training = options.pop("training", True)
    stock, lean = pair(**options)
    rng = np.random.RandomState(0)
    inputs = [tf.constant(rng.randn(2, 9, 12)), tf.constant(rng.randn(2, 7, 12))]
    upstream = tf.constant(rng.randn(2, 9, 12))
    np.testing.assert_allclose(lean(inputs).numpy(), stock(inputs).numpy(), rtol=1e-12,
                               atol=1e-13)
    (loss_a, expected), (loss_b, got) = (step(m, inputs, upstream, training)
                                         for m in (stock, lean))
    assert expected.keys() == got.keys()
    for path, g in expected.items():
        np.testing.assert_allclose(got[path].numpy(), g.numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=path)


@pytest.mark.parametrize("mask", [False, True], ids=["no_mask", "mask"])
def test_dropout_in_training_replays_the_stock_mask_exactly(float64, mask):
    """Dropout 0.5 on the probabilities: from the same seed state, the twin drops what
    stock drops, forward and backward (its mask drawn again from the seed). With a
    mask too, the stock code runs (its softmax zeroes a query that sees no key)."""
    stock, lean = pair(dropout=0.5, mask=mask)
    lean.get_layer("attention")._dropout_layer.seed_generator.state.assign(
        stock.get_layer("attention")._dropout_layer.seed_generator.state)
    rng = np.random.RandomState(0)
    inputs = [tf.constant(rng.randn(2, 9, 12)), tf.constant(rng.randn(2, 7, 12))]
    upstream = tf.constant(rng.randn(2, 9, 12))
    (loss_a, expected), (loss_b, got) = (step(m, inputs, upstream) for m in (stock, lean))
    np.testing.assert_allclose(loss_b.numpy(), loss_a.numpy(), rtol=1e-12)
    for path, g in expected.items():
        np.testing.assert_allclose(got[path].numpy(), g.numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=path)
    first, second = (lean(inputs, training=True).numpy() for _ in range(2))
    assert not np.allclose(first, second)  # a new mask each call
    assert not np.allclose(first, lean(inputs, training=False).numpy())


@pytest.mark.parametrize("policy, size", [("float32", 4), ("mixed_bfloat16", 2)])
def test_it_does_not_keep_the_probabilities(policy, size):
    """4 x 3 heads x 65 x 65 probabilities: stock keeps them, the twin not, in float32
    and in half precision (by the traced step's kept tensors)."""
    keras.config.set_dtype_policy(policy)
    try:
        stock, lean = pair(tokens=65, keys=65)
    finally:
        keras.config.set_dtype_policy("float32")
    rng = np.random.RandomState(0)
    inputs = [tf.constant(rng.randn(4, 65, 12).astype("float32")) for _ in range(2)]
    probabilities = 4 * 3 * 65 * 65 * size
    assert kept_bytes(stock, inputs) - kept_bytes(lean, inputs) >= probabilities


def test_the_backward_pass_draws_the_dropout_mask_only_once_dy_exists():
    """TF runs backward-pass work that does not wait for the incoming gradient during the
    forward pass: a draw that depends on the seed alone runs there, and TF's optimiser
    then merges it with the forward draw, keeping the mask until the backward pass.
    Every draw in the backward pass must depend on dy."""
    spec = tf.TensorSpec([2, 16, 2, 4], tf.float32)

    @tf.function
    def step(q, k, v, upstream, seed):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            out = lean_attention(q, k, v, scale=0.5, dropout=(0.1, seed), name="lean")
            loss = tf.reduce_sum(out * upstream)
        return tape.gradient(loss, [q, k, v])

    graph = step.get_concrete_function(spec, spec, spec, spec,
                                       tf.TensorSpec([2], tf.int32)).graph
    upstream = graph.inputs[3].op.name

    def ancestors(op):
        seen, stack = set(), [op]
        while stack:
            o = stack.pop()
            if o.name not in seen:
                seen.add(o.name)
                stack += [t.op for t in o.inputs] + list(o.control_inputs)
        return seen

    draws = [op for op in graph.get_operations() if op.type == "StatelessRandomUniformV2"]
    backward = [op for op in draws if op.name.startswith("lean/")]
    assert len(draws) == 2 and len(backward) == 1  # one forward, one backward
    assert upstream in ancestors(backward[0])


def test_mixed_bfloat16_outputs_equal_stock_at_a_scale_bfloat16_does_not_hold():
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        stock, lean = pair(key_dim=3)
    finally:
        keras.config.set_dtype_policy("float32")
    rng = np.random.RandomState(0)
    inputs = [tf.constant(rng.randn(2, 9, 12).astype("float32") * 3),
              tf.constant(rng.randn(2, 7, 12).astype("float32") * 3)]
    np.testing.assert_array_equal(lean(inputs).numpy(), stock(inputs).numpy())


def test_dropout_at_rate_one_runs_the_stock_code():
    stock, lean = pair(dropout=1.0)
    rng = np.random.RandomState(0)
    inputs = [tf.constant(rng.randn(2, 9, 12).astype("float32")),
              tf.constant(rng.randn(2, 7, 12).astype("float32"))]
    np.testing.assert_array_equal(lean(inputs, training=True).numpy(),
                                  stock(inputs, training=True).numpy())


def _biased_reference(q, k, v, scale, bias):
    """Attention with the bias terms added to a materialized [B, N, T, S] logits map."""
    logits = tf.einsum("BTNH,BSNH->BNTS", q, k) * scale
    for term in bias:
        if isinstance(term, tuple):
            rows, columns = term
            grid = rows[..., :, None] + columns[..., None, :]
            logits += tf.reshape(grid, tf.shape(logits))
        else:
            logits += term
    return tf.einsum("BNTS,BSNH->BTNH", tf.nn.softmax(logits, -1), v)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
def test_bias_terms_and_their_gradients_equal_the_summed_logits_in_float64(compiled):
    """A broadcast bias (Swin's [1, N, T, S] relative position bias) and a rows/columns
    pair over a 3 x 4 key grid (SAM's decomposed relative positions): outputs and every
    gradient, bias terms included, as autodiff of the summed logits gives them."""
    rng = np.random.RandomState(0)
    t = lambda *shape: tf.constant(rng.randn(*shape))
    q, k, v = t(2, 5, 3, 4), t(2, 12, 3, 4), t(2, 12, 3, 6)
    bias = (t(1, 3, 5, 12), (t(2, 3, 5, 3), t(2, 3, 5, 4)))
    upstream = t(2, 5, 3, 6)
    inputs = [q, k, v, bias[0], *bias[1]]

    def grads(fn):
        def run():
            with tf.GradientTape() as tape:
                tape.watch(inputs)
                out = fn(q, k, v, scale=0.5, bias=(inputs[3], (inputs[4], inputs[5])))
                loss = tf.reduce_sum(out * upstream)
            return out, tape.gradient(loss, inputs)
        return (tf.function(run) if compiled else run)()

    (out, got), (expected_out, expected) = grads(lean_attention), grads(_biased_reference)
    np.testing.assert_allclose(out, expected_out, rtol=1e-12, atol=1e-12)
    for name, a, b in zip("q k v bias rows columns".split(), got, expected):
        assert a.shape == b.shape, name
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, err_msg=name)
