"""Half-precision sums in the twins run in float32, as TF's conv kernels accumulate:
the dilated depthwise twin's shifted taps (`tfseg.layers.dilated`: forward, input and
filter gradients), the channel-scale gradient of a conv twin and a recomputed tail's
bias gradient. TF's `Sum` accumulates float16 in float16 on the CPU
(and in the input's dtype on some GPU paths): over 10^4 terms it loses most digits."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.layers import LeanDepthwiseConv2D, Recompute, ReluConv2D, ReluDepthwiseConv2D, dilated
from tests.layers.twins import ReluThenDepthwise, training_ops

HALF = {"mixed_float16": tf.float16, "mixed_bfloat16": tf.bfloat16}
SHAPE = (2, 97, 129, 4)  # a sum of 25,000 terms per filter tap


@pytest.fixture(autouse=True)
def shifted_taps(monkeypatch):
    """The dilated twins take the shifted taps wherever they apply (not only where
    TF's space-to-batch copy would be large)."""
    monkeypatch.setattr(dilated, "MIN_COPY_RATIO", {"CPU": 0.0, "GPU": 0.0})


@pytest.fixture(params=sorted(HALF))
def policy(request):
    keras.mixed_precision.set_global_policy(request.param)
    yield request.param
    keras.mixed_precision.set_global_policy("float32")


def _half_sums(fn, *specs):
    """The `Sum`/`Mean` ops of fn's traced graph that reduce a half-precision tensor of
    rank 4 (an activation), as (name, input dtype)."""
    graph = tf.function(fn).get_concrete_function(*specs).graph
    return [(op.name, op.inputs[0].dtype.name) for op in graph.get_operations()
            if op.type in ("Sum", "Mean") and op.inputs[0].dtype in (tf.float16, tf.bfloat16)
            and op.inputs[0].shape.rank == 4]


def _gradients(layer):
    def step(*xs):
        with tf.GradientTape() as tape:
            tape.watch(xs)
            y = layer(*xs, training=True) if isinstance(layer, Recompute) else layer(*xs)
            loss = tf.reduce_sum(tf.cast(y, tf.float32))
        return tape.gradient(loss, list(xs) + layer.trainable_weights)
    return step


def test_the_twins_sum_half_precision_activations_in_float32(policy):
    spec = tf.TensorSpec((2, 17, 19, 4), tf.float32)
    dilated = LeanDepthwiseConv2D(3, dilation_rate=6, padding="same")
    assert _half_sums(_gradients(dilated), spec) == []
    relu_dilated = ReluDepthwiseConv2D(3, dilation_rate=6, padding="same")
    assert _half_sums(_gradients(relu_dilated), spec) == []

    conv = ReluConv2D(5, 1)  # with a squeeze-and-excitation scale: its gradient is a sum
    scale_spec = tf.TensorSpec((2, 1, 1, 4), tf.float32)
    scaled = lambda x, s: conv(x, scale=s)  # noqa: E731
    scaled.trainable_weights = []
    assert _half_sums(_gradients(scaled), spec, scale_spec) == []

    x = keras.Input((None, None, 4))
    block = keras.Model(x, keras.layers.DepthwiseConv2D(3, padding="same")(keras.layers.ReLU()(x)))
    tail = keras.layers.Conv2D(5, 1, use_bias=True)
    recompute = Recompute(block, tail=tail)
    assert _half_sums(_gradients(recompute), spec) == []


def _model(twin, policy):
    """ReLU -> dilated depthwise (rate 6) -> 1x1 conv with bias, stock or memory saving."""
    keras.mixed_precision.set_global_policy(policy)
    try:
        x = keras.Input(SHAPE[1:])
        if twin:
            y = ReluDepthwiseConv2D(3, dilation_rate=6, padding="same", name="depthwise")(x)
        else:
            y = keras.layers.DepthwiseConv2D(3, dilation_rate=6, padding="same",
                                             name="depthwise")(keras.layers.ReLU()(x))
        y = keras.layers.Conv2D(3, 1, name="pointwise")(y)
        return keras.Model(x, keras.layers.Activation("linear", dtype="float32")(y))
    finally:
        keras.mixed_precision.set_global_policy("float32")


def _step_gradients(model, x, upstream):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.cast(model(x, training=True), tf.float64) * upstream)
    return [np.asarray(tf.cast(g, tf.float64)) for g in tape.gradient(loss, model.trainable_weights)]


def test_a_half_precision_step_is_as_close_to_float64_as_stock(policy):
    """Each weight's gradient in a float16 / bfloat16 step of the memory-saving model is
    no further from the float64 step's than the stock model's. All-positive inputs and
    output gradients: the filter gradient's sums grow, where a half-precision running
    sum stops adding (float16: past 2048 an addend below 1 is rounded away)."""
    rng = np.random.default_rng(0)
    x = tf.constant(np.abs(rng.normal(size=SHAPE)) + 0.5)
    # Small enough that no float16 gradient overflows (the sums reach 25,000 terms).
    upstream = tf.constant(rng.uniform(0.5, 1.5, SHAPE[:3] + (3,)) * 1e-3)
    reference = _model(twin=False, policy="float64")
    weights = [w + rng.normal(size=w.shape) * 0.3 for w in reference.get_weights()]
    reference.set_weights(weights)
    expected = _step_gradients(reference, x, upstream)
    errors = {}
    for twin in (False, True):
        model = _model(twin, policy)
        model.set_weights(weights)
        got = _step_gradients(model, tf.cast(x, tf.float32), upstream)
        errors[twin] = [np.abs(g - e).max() / np.abs(e).max() for g, e in zip(got, expected)]
    names = [w.path for w in reference.trainable_weights]
    assert np.isfinite(errors[False] + errors[True]).all(), errors
    for name, stock, twin in zip(names, errors[False], errors[True]):
        assert twin <= stock * 1.25 + 1e-4, (name, policy, errors)
    # The depthwise kernel's, where the twin's own sums run: closer than stock's here.
    assert errors[True][0] < errors[False][0], errors


# ASPP's atrous rates, each on a map small enough for a test but at least as wide as
# the taps' reach, so that each tap has an overlap and a padded edge.
ASPP = {6: (1, 33, 33, 16), 18: (1, 65, 65, 8)}
TWINS = {"lean": (keras.layers.DepthwiseConv2D, LeanDepthwiseConv2D),
         "relu": (ReluThenDepthwise, ReluDepthwiseConv2D)}


def _depthwise(cls, policy, rate, kernel):
    keras.mixed_precision.set_global_policy(policy)
    try:
        layer = cls(3, dilation_rate=rate, padding="same", use_bias=False)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    layer.build((None, None, None, kernel.shape[2]))
    layer.set_weights([kernel])
    return layer


def _output_and_gradients(layer, x, upstream):
    """(output, input gradient, kernel gradient) in float64."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
        loss = tf.reduce_sum(tf.cast(y, tf.float64) * upstream)
    dx, dk = tape.gradient(loss, [x, layer.kernel])
    return [np.asarray(tf.cast(t, tf.float64)) for t in (y, dx, dk)]


def _aspp_data(rate, dtype):
    """x, the output gradient and the kernel of an ASPP-like branch, each a value that
    `dtype` holds exactly: the errors measured are then those of the sums alone."""
    rng = np.random.default_rng(rate)
    shape = ASPP[rate]
    exact = lambda a: tf.cast(tf.cast(a, dtype), tf.float64)  # noqa: E731
    return (exact(rng.normal(size=shape)), exact(rng.normal(size=shape)),
            np.asarray(exact(rng.normal(size=(3, 3, shape[3], 1)))))


def _relative_error(got, expected):
    return np.linalg.norm(got - expected) / np.linalg.norm(expected)


@pytest.mark.parametrize("twin", sorted(TWINS))
@pytest.mark.parametrize("rate", sorted(ASPP))
def test_the_shifted_taps_are_as_close_to_float64_as_stock(rate, twin, policy, monkeypatch):
    """The twin's output, input and kernel gradients under a half-precision policy are
    no further (1.15x) from float64's than stock `DepthwiseConv2D`'s, nor than a
    float32 sum rounded once to the half type (what oneDNN's and cuDNN's kernels give;
    TF's own CPU kernels, which the tests run, sum bfloat16 in bfloat16 and are looser).
    The taps' forward and input-gradient sums rounded after each add, or each tap's
    filter-gradient product rounded, in the half type: 1.1-2.3x further than the latter."""
    # In channel chunks, as large maps go (raising=False: it also runs where there are none).
    monkeypatch.setattr(dilated, "MIN_CHUNKED_BYTES", 0, raising=False)
    stock_class, twin_class = TWINS[twin]
    half = HALF[policy]
    x, upstream, kernel = _aspp_data(rate, half)
    expected = _output_and_gradients(_depthwise(stock_class, "float64", rate, kernel), x, upstream)
    x32 = tf.cast(x, tf.float32)
    float32 = _output_and_gradients(_depthwise(stock_class, "float32", rate, kernel), x32,
                                    upstream)
    errors = {"float32 rounded once": [np.asarray(tf.cast(tf.cast(t, half), tf.float64))
                                       for t in float32]}
    for name, cls in [("stock", stock_class), ("twin", twin_class)]:
        errors[name] = _output_and_gradients(_depthwise(cls, policy, rate, kernel), x32, upstream)
    errors = {k: [_relative_error(g, e) for g, e in zip(v, expected)] for k, v in errors.items()}
    for i, name in enumerate(["output", "input gradient", "kernel gradient"]):
        floor = min(errors["stock"][i], errors["float32 rounded once"][i])
        assert 0 < floor and errors["twin"][i] <= 1.15 * floor, (name, errors)


@pytest.mark.parametrize("twin", sorted(TWINS))
@pytest.mark.parametrize("rate", sorted(ASPP))
def test_the_shifted_taps_equal_stock_in_float64(rate, twin):
    """Summing in the accumulator's chunks leaves float64 (and float32) as stock's."""
    stock_class, twin_class = TWINS[twin]
    x, upstream, kernel = _aspp_data(rate, tf.float64)
    expected = _output_and_gradients(_depthwise(stock_class, "float64", rate, kernel), x, upstream)
    got = _output_and_gradients(_depthwise(twin_class, "float64", rate, kernel), x, upstream)
    for name, g, e in zip(["output", "input gradient", "kernel gradient"], got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12 * np.abs(e).max(), err_msg=name)


def test_half_precision_sums_in_float32_go_a_quarter_of_the_channels_at_a_time(policy):
    """On an ASPP-sized map (one example's output over `MIN_CHUNKED_BYTES`), the
    shifted taps' float32 terms and running sums (forward, input and filter gradients)
    hold a quarter of the channels: their float32 working set stays below that of
    half-precision sums over all channels, so the twin keeps its saving."""
    shape = (1, 33, 33, 512)
    keras.mixed_precision.set_global_policy(policy)
    layer = LeanDepthwiseConv2D(3, dilation_rate=6, padding="same", use_bias=False)
    ops = training_ops(layer, shape)
    sums = [op.outputs[0].shape.num_elements() for op in ops if op.type in ("AddV2", "Mul")
            and op.outputs[0].dtype == tf.float32 and op.outputs[0].shape.rank == 4]
    assert sums and max(sums) <= np.prod(shape) // dilated.HALF_CHUNKS, sums
