import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg import memory
from tfseg.layers import Recompute
from tfseg.models import LayerPolicy
from tfseg.models.policy import separable_conv
from tests.layers.twins import ancestors, compare, training_ops


def unit(channels=8, memory_saving=False):
    x = keras.Input((None, None, channels))
    y = separable_conv(x, channels, LayerPolicy(), "u_sepconv1")
    y = separable_conv(y, channels, LayerPolicy(), "u_sepconv2", rate=2)
    model = keras.Model(x, keras.layers.Add()([x, y]), name="unit")
    return memory.rewrite(model) if memory_saving else model


def run(model, x, compiled):
    def step():
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(model(x, training=True) ** 2)
        return [loss] + tape.gradient(loss, [x] + model.trainable_variables)

    return (tf.function(step) if compiled else step)()


@pytest.mark.parametrize("memory_saving", [False, True])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
def test_recompute_matches_plain_block_and_updates_statistics_once(compiled, memory_saving):
    plain = unit(memory_saving=memory_saving)
    inner = unit(memory_saving=memory_saving)
    inner.set_weights(plain.get_weights())
    inputs = keras.Input((None, None, 8))
    wrapped = keras.Model(inputs, Recompute(inner, name="unit_recompute")(inputs))
    x = tf.constant(np.random.RandomState(0).randn(2, 9, 7, 8).astype("float32"))
    expected, got = run(plain, x, compiled), run(wrapped, x, compiled)
    assert len(got) == len(expected) == 2 + 12  # loss, dx, 2 x (dw, bn, pw, bn)
    scale = max(float(np.abs(a.numpy()).max()) for a in expected)
    for a, b in zip(expected, got):
        # Betas before a pointwise conv + norm have a true gradient of 0: compare to scale.
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-4, atol=1e-7 * scale)
    # One step moved the moving mean once, not twice.
    for a, b in zip(plain.non_trainable_weights, inner.non_trainable_weights):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-6, atol=1e-7)
        assert (a.numpy() != (0 if "mean" in a.path else 1)).any()


def test_recompute_layer_round_trips_through_config():
    inputs = keras.Input((None, None, 8))
    model = keras.Model(inputs, Recompute(unit(), name="r")(inputs))
    clone = keras.Model.from_config(model.get_config())
    clone.set_weights(model.get_weights())
    x = np.random.rand(1, 5, 5, 8).astype("float32")
    np.testing.assert_array_equal(clone(x, training=False), model(x, training=False))


def test_recompute_refuses_blocks_with_dropout():
    x = keras.Input((None, None, 4))
    block = keras.Model(x, keras.layers.Dropout(0.5)(x))
    with pytest.raises(ValueError, match="dropout"):
        Recompute(block, name="r")


def separable(policy_norm, rate, strides, relu_inside, bias, name):
    """Stock [ReLU ->] [pad ->] depthwise -> norm [-> ReLU] as a model, and the 1x1 conv."""
    x = keras.Input((None, None, 6))
    y = x if relu_inside else keras.layers.ReLU()(x)
    if strides > 1:
        y = keras.layers.ZeroPadding2D(((1, 1), (1, 1)))(y)
    y = keras.layers.DepthwiseConv2D(3, strides=strides, dilation_rate=rate,
                                     padding="valid" if strides > 1 else "same",
                                     name=f"{name}_depthwise")(y)
    norm = (keras.layers.GroupNormalization(groups=3, name=f"{name}_bn") if policy_norm == "group"
            else keras.layers.BatchNormalization(momentum=0.9, name=f"{name}_bn"))
    y = norm(y)
    if relu_inside:
        y = keras.layers.ReLU()(y)
    return keras.Model(x, y), keras.layers.Conv2D(5, 1, use_bias=bias, name=f"{name}_pointwise")


class Composition(keras.layers.Layer):
    """The stock separable conv as one layer, for `compare`."""

    def __init__(self, block, tail, **kwargs):
        super().__init__(**kwargs)
        tail.build(block.outputs[0].shape)
        self.block, self.tail = block, tail

    def call(self, inputs, training=None):
        return self.tail(self.block(inputs, training=training))

    def compute_output_shape(self, shape):
        return self.tail.compute_output_shape(self.block.compute_output_shape(shape))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("norm,rate,strides,relu_inside,bias", [
    ("batch", 1, 1, False, False), ("batch", 1, 2, False, True), ("group", 2, 1, True, False),
    ("batch", 3, 1, True, True)], ids=["plain", "stride2_bias", "group_dilated", "relu_inside"])
def test_recompute_with_pointwise_tail_matches_stock_separable_conv(
        norm, rate, strides, relu_inside, bias, compiled):
    stock = Composition(*separable(norm, rate, strides, relu_inside, bias, "a"))
    block, tail = separable(norm, rate, strides, relu_inside, bias, "b")
    twin = Recompute(block, tail=tail, name="b_recompute")
    # The tail was built outside the wrapper: its variables keep their own paths.
    assert tail.kernel.path == "b_pointwise/kernel"
    compare(stock, twin, (2, 11, 9, 6), compiled)


def test_recompute_with_tail_under_mixed_bfloat16(mixed_bfloat16):
    stock = Composition(*separable("batch", 1, 1, False, True, "a"))
    twin = Recompute(*separable("batch", 1, 1, False, True, "b"), name="b_recompute")
    compare(stock, twin, (2, 9, 7, 6), compiled=True, dtype="bfloat16", rtol=2e-2, atol=5e-2)


def test_block_backward_waits_for_the_tail_filter_gradient():
    """The block's backward pass starts after the tail's filter gradient: otherwise the
    tail's output gradient and the block's output stay alive through the block's
    whole backward working set (TF's executor ran the filter gradient last)."""
    block, tail = separable("batch", 1, 1, True, False, "b")
    layer = Recompute(block, tail=tail, name="b_recompute")
    layer.build((2, 11, 9, 6))
    ops = training_ops(layer, (2, 11, 9, 6))
    (filter_grad,) = [op for op in ops if op.type == "Conv2DBackpropFilter"]
    block_grads = [op for op in ops
                   if op.type in ("ReluGrad", "DepthwiseConv2dNativeBackpropInput")]
    assert len(block_grads) == 2
    for op in block_grads:
        assert filter_grad in ancestors(op), op.name


def test_tail_input_gradient_is_made_after_the_block_runs_again():
    """The tail's input gradient needs only dz, but it is made after the filter
    gradient, so after the block's second run: made first, it sat beside that run
    as one more tensor of the block output's size (the 513x513 recompute peak)."""
    block, tail = separable("batch", 1, 1, True, False, "b")
    layer = Recompute(block, tail=tail, name="b_recompute")
    layer.build((2, 11, 9, 6))
    ops = training_ops(layer, (2, 11, 9, 6))
    (input_grad,) = [op for op in ops if op.type == "Conv2DBackpropInput"]
    (filter_grad,) = [op for op in ops if op.type == "Conv2DBackpropFilter"]
    forward, again = [op for op in ops if op.type == "DepthwiseConv2dNative"]  # made in order
    assert filter_grad in ancestors(input_grad) and again in ancestors(input_grad)


def test_recompute_refuses_a_tail_that_is_not_linear():
    block, _ = separable("batch", 1, 1, False, False, "a")
    with pytest.raises(ValueError, match="tail"):
        Recompute(block, tail=keras.layers.Conv2D(4, 1, activation="relu"), name="r")


def test_property_separable_tail_over_random_shapes():
    rng = np.random.RandomState(5)
    for trial in range(8):
        norm = str(rng.choice(["batch", "group"]))
        rate, strides = (int(rng.choice([1, 2, 3])), 1) if rng.rand() < 0.5 else (1, 2)
        relu_inside, bias = bool(rng.rand() < 0.5), bool(rng.rand() < 0.5)
        shape = (int(rng.randint(1, 3)), int(rng.randint(5, 16)), int(rng.randint(5, 16)), 6)
        stock = Composition(*separable(norm, rate, strides, relu_inside, bias, f"a{trial}"))
        twin = Recompute(*separable(norm, rate, strides, relu_inside, bias, f"b{trial}"),
                         name=f"b{trial}_recompute")
        compare(stock, twin, shape, compiled=bool(trial % 2), seed=trial)


@pytest.mark.parametrize("norm", ["batch", "group"])
def test_a_relu_between_block_and_tail_is_the_stock_composition(norm):
    """`tail_relu`: the block ends at the norm, the layer applies the ReLU before the
    tail, and the ReLU's gradient reads the norm's output, not the ReLU's (which lives
    only while the tail's filter gradient is made)."""
    stock = Composition(*separable(norm, 1, 1, True, True, "a"))
    block, tail = separable(norm, 1, 1, True, True, "b")
    without_relu = keras.Model(block.inputs, block.layers[-2].output)  # up to the norm
    twin = Recompute(without_relu, tail=tail, tail_relu=True, name="b_recompute")
    compare(stock, twin, (2, 11, 9, 6), compiled=True)
    ops = training_ops(twin, (2, 11, 9, 6))
    relu_grads = [op for op in ops if op.type == "ReluGrad"]
    assert relu_grads and all(op.inputs[1].op.type != "Relu" for op in relu_grads)
    clone = Recompute.from_config(twin.get_config())
    assert clone.tail_relu


def _resized_concat(name):
    """[small map, low map] -> resize the small one to the low one's size, concatenate."""
    from tfseg.layers import ResizeLike
    high, low = keras.Input((None, None, 4)), keras.Input((None, None, 3))
    up = ResizeLike(name=f"{name}_up")([high, low])
    return keras.Model([high, low], keras.layers.Concatenate()([up, low]))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
def test_a_block_of_two_inputs_with_a_depthwise_tail(compiled, float64):
    """The decoder's form: the block rebuilds the resize and concatenation of its two
    inputs; the depthwise conv after it is the tail, from its backprop kernels."""
    rng = np.random.RandomState(0)
    high, low = tf.constant(rng.randn(2, 3, 4, 4)), tf.constant(rng.randn(2, 9, 13, 3))
    stock_tail = keras.layers.DepthwiseConv2D(3, padding="same", name="dw")
    block, tail = _resized_concat("s"), keras.layers.DepthwiseConv2D(3, padding="same",
                                                                      name="dw")
    twin = Recompute(block, tail=tail, name="r")
    stock_tail.build((2, 9, 13, 7))
    stock_tail.set_weights([rng.randn(3, 3, 7, 1), rng.randn(7)])
    tail.set_weights(stock_tail.get_weights())
    upstream = tf.constant(rng.randn(2, 9, 13, 7))

    def step(layer):
        def run():
            with tf.GradientTape() as tape:
                tape.watch([high, low])
                y = layer([high, low])
                loss = tf.reduce_sum(y * upstream)
            return [y] + tape.gradient(loss, [high, low, *tail_of(layer).trainable_weights])
        return (tf.function(run) if compiled else run)()

    tail_of = lambda layer: stock_tail if layer is not twin else tail  # noqa: E731
    composed = lambda xs, training=None: stock_tail(block(xs))  # noqa: E731
    want = step(composed)
    got = step(twin)
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
