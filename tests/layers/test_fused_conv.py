
import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.layers import (ActivationConv2D, ActivationDepthwiseConv2D,
                          LeanDepthwiseConv2D, ReluConv2D, ReluDepthwiseConv2D)
from tfseg.layers import dilated, elementwise
from tests.layers.twins import ReluThenDepthwise, ancestors, compare, training_ops

CASES = {
    "same": dict(padding="same"),
    "stride2_valid": dict(strides=2, padding="valid"),
    "stride2_same": dict(strides=2, padding="same"),
    "dilation2": dict(padding="same", dilation_rate=2),
    "dilation3_valid": dict(padding="valid", dilation_rate=3),
    "bias_multiplier": dict(padding="same", use_bias=True, depth_multiplier=2),
}


@pytest.fixture(params=["shifted", "space_to_batch"])
def dilated_form(request, monkeypatch):
    """Runs a test with each form of the dilated twins: the shifted taps (wherever
    they apply) and TF's space-to-batch (never the taps)."""
    ratio = 0.0 if request.param == "shifted" else np.inf
    monkeypatch.setattr(dilated, "MIN_COPY_RATIO", {"CPU": ratio, "GPU": ratio})
    return request.param


class ReluPadDepthwise(keras.layers.DepthwiseConv2D):
    """Stock ReLU -> ZeroPadding2D -> DepthwiseConv2D(valid), as one layer."""

    def __init__(self, *args, input_padding, **kwargs):
        super().__init__(*args, **kwargs)
        self.pad = keras.layers.ZeroPadding2D(input_padding)

    def call(self, inputs):
        return super().call(self.pad(tf.nn.relu(inputs)))

    def compute_output_shape(self, shape):
        return super().compute_output_shape(self.pad.compute_output_shape(shape))


class ReluThenConv(keras.layers.Conv2D):
    def call(self, inputs):
        return super().call(tf.nn.relu(inputs))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_relu_depthwise_matches_stock(case, compiled, dilated_form):
    kwargs = CASES[case]
    compare(ReluThenDepthwise(3, **kwargs), ReluDepthwiseConv2D(3, **kwargs), (2, 13, 11, 6),
            compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("padding,rate", [(((1, 1), (1, 1)), 1), (((2, 2), (2, 2)), 2),
                                          (((0, 1), (1, 0)), 1)])
def test_folded_zero_padding_matches_stock(padding, rate, compiled, dilated_form):
    kwargs = dict(strides=2 if rate == 1 else 1, dilation_rate=rate, padding="valid")
    compare(ReluPadDepthwise(3, input_padding=padding, **kwargs),
            ReluDepthwiseConv2D(3, input_padding=padding, **kwargs), (2, 13, 11, 6), compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("rate,padding", [(2, "same"), (6, "same"), (3, "valid"), (8, "same"),
                                          ((2, 3), "same"), ((3, 2), "valid")])
def test_lean_dilated_depthwise_matches_stock(rate, padding, compiled, dilated_form):
    kwargs = dict(dilation_rate=rate, padding=padding)
    compare(keras.layers.DepthwiseConv2D(3, **kwargs), LeanDepthwiseConv2D(3, **kwargs),
            (2, 15, 13, 5), compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("kwargs", [dict(kernel_size=1), dict(kernel_size=3, padding="same"),
                                    dict(kernel_size=3, strides=2, use_bias=True),
                                    dict(kernel_size=3, dilation_rate=2, padding="same")],
                         ids=["1x1", "3x3", "3x3_stride2_bias", "3x3_dilated"])
def test_relu_conv_matches_stock(kwargs, compiled):
    # Dilated: differentiable with TF's own CPU kernels too (TF_ENABLE_ONEDNN_OPTS=0),
    # where a dilated Conv2D op has no gradient kernel (a dilated ResNet's backward).
    compare(ReluThenConv(7, **kwargs), ReluConv2D(7, **kwargs), (2, 11, 9, 6), compiled)


def step_op_types(layer, shape):
    layer.build(shape)
    return {op.type for op in training_ops(layer, shape)}


@pytest.mark.parametrize("cls", [LeanDepthwiseConv2D, ReluDepthwiseConv2D])
def test_dilated_twins_make_no_space_to_batch_copy(cls):
    """TF's dilated depthwise conv pads a space-to-batch copy up to a multiple of the
    rate (4.8x the input at ASPP's rate 18 on 33x33), forward and backward. The
    twins sum shifted taps instead; the stock layer shows what the test looks for."""
    shape, kwargs = (2, 33, 33, 4), dict(dilation_rate=18, padding="same")
    space_to_batch = {"SpaceToBatchND", "BatchToSpaceND"}
    assert space_to_batch <= step_op_types(keras.layers.DepthwiseConv2D(3, **kwargs), shape)
    assert not space_to_batch & step_op_types(cls(3, **kwargs), shape)


@pytest.mark.parametrize("cls, args, kernel_op", [
    (ReluDepthwiseConv2D, (3,), "DepthwiseConv2dNative"), (ReluConv2D, (4, 3), "Conv2D")])
def test_folded_padding_makes_no_padded_copy_and_filter_gradient_goes_first(
        cls, args, kernel_op):
    """A folded ZeroPadding2D is the kernels' explicit padding: no Pad copy of relu(x)
    and no padded input gradient to slice (at 513x513 entry block 1's strided conv:
    4 x 65 MiB alive at once; ResNetV2 pads before each 3x3 conv). The input gradient
    waits for the filter gradient, so relu(x) is free before it and its ReLU mask
    are made."""
    layer = cls(*args, strides=2, padding="valid", input_padding=((1, 1), (1, 1)))
    shape = (2, 13, 11, 6)
    layer.build(shape)
    ops = training_ops(layer, shape)
    assert not {"Pad", "PadV2", "StridedSlice"} & {op.type for op in ops}
    (input_grad,) = [op for op in ops if op.type == kernel_op + "BackpropInput"]
    (filter_grad,) = [op for op in ops if op.type == kernel_op + "BackpropFilter"]
    assert filter_grad in ancestors(input_grad)


def test_input_gradient_is_masked_where_input_is_not_positive():
    _, (_, dx, *_) = compare(ReluThenDepthwise(3, padding="same"),
                             ReluDepthwiseConv2D(3, padding="same"), (1, 7, 9, 4), True, seed=3)
    x = np.random.RandomState(3).randn(1, 7, 9, 4).astype("float32") * 2 + 0.5
    assert (dx.numpy()[x <= 0] == 0).all()
    assert (dx.numpy()[x > 0] != 0).mean() > 0.9


def test_twins_round_trip_through_config():
    layer = ReluDepthwiseConv2D(3, padding="valid", strides=2, input_padding=((1, 1), (1, 1)))
    clone = ReluDepthwiseConv2D.from_config(layer.get_config())
    assert clone.input_padding == ((1, 1), (1, 1))
    assert clone.compute_output_shape((1, 9, 9, 4)) == (1, 5, 5, 4)


def test_fused_convs_under_mixed_bfloat16(mixed_bfloat16):
    compare(ReluThenDepthwise(3, padding="same"), ReluDepthwiseConv2D(3, padding="same"),
            (2, 9, 7, 8), compiled=True, dtype="bfloat16", rtol=2e-2, atol=5e-2)
    compare(ReluThenConv(4, 1), ReluConv2D(4, 1), (2, 9, 7, 8), compiled=True, dtype="bfloat16",
            rtol=2e-2, atol=5e-2)
    dilated_kwargs = dict(padding="same", dilation_rate=4)  # the shifted taps
    compare(ReluThenDepthwise(3, **dilated_kwargs), ReluDepthwiseConv2D(3, **dilated_kwargs),
            (2, 9, 7, 8), compiled=True, dtype="bfloat16", rtol=2e-2, atol=5e-2)


# One test a trial: ten in one took 35 s in a loaded CI run, over the fast tier's 20 s.
@pytest.mark.parametrize("trial", range(10))
def test_property_many_random_shapes(trial):
    rng = np.random.RandomState(11 + trial)
    kwargs = dict(strides=int(rng.choice([1, 2])), padding=str(rng.choice(["same", "valid"])))
    if kwargs["strides"] == 1:
        kwargs["dilation_rate"] = int(rng.choice([1, 2]))
    shape = (int(rng.randint(1, 3)), int(rng.randint(5, 15)), int(rng.randint(5, 15)),
             int(rng.randint(1, 6)))
    compare(ReluThenDepthwise(3, **kwargs), ReluDepthwiseConv2D(3, **kwargs), shape,
            compiled=bool(trial % 2), seed=trial)
    conv_kwargs = {k: v for k, v in kwargs.items() if k != "dilation_rate"}  # see above
    compare(ReluThenConv(3, 3, **conv_kwargs), ReluConv2D(3, 3, **conv_kwargs), shape,
            compiled=bool(trial % 2), seed=trial)


# Activations a twin takes in, each as the stock layer a model has before its conv.
ACTIVATIONS = {
    "relu6": lambda: keras.layers.ReLU(6.0),
    "leaky_relu": lambda: keras.layers.LeakyReLU(0.1),
    "swish": lambda: keras.layers.Activation("swish"),
    "hard_swish": lambda: keras.layers.Activation("hard_swish"),
    "gelu": lambda: keras.layers.Activation("gelu"),
    "elu": lambda: keras.layers.ELU(),
    "sigmoid": lambda: keras.layers.Activation("sigmoid"),
}


def _then(conv_class, activation, pad=None):
    """The stock composition activation [-> zero padding] -> conv, as one layer."""

    class Then(conv_class):
        def call(self, inputs):
            outputs = activation(inputs)
            if pad is not None:
                outputs = tf.pad(outputs, [[0, 0], *pad, [0, 0]])
            return super().call(outputs)

        def compute_output_shape(self, shape):
            if pad is not None:
                shape = (shape[0], shape[1] + sum(pad[0]), shape[2] + sum(pad[1]), shape[3])
            return super().compute_output_shape(shape)

    return Then


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
def test_activation_twins_match_stock_in_float64(act, compiled, float64):
    """Exact (float64, 1e-10) for every activation a twin takes in: outputs, the input
    gradient through the activation run again, and the kernel gradient."""
    value = elementwise.serialize(ACTIVATIONS[act]())
    stock_act = elementwise.deserialize(value)
    for stock_class, twin_class, args, kwargs in [
            (keras.layers.DepthwiseConv2D, ActivationDepthwiseConv2D, (3,),
             dict(strides=2, padding="valid", input_padding=((1, 1), (0, 1)))),
            (keras.layers.DepthwiseConv2D, ActivationDepthwiseConv2D, (3,), dict(padding="same")),
            (keras.layers.Conv2D, ActivationConv2D, (5, 1), {}),
            (keras.layers.Conv2D, ActivationConv2D, (5, 3), dict(strides=2, use_bias=True)),
            (keras.layers.Conv2D, ActivationConv2D, (5, 3),
             dict(strides=2, padding="valid", input_padding=((1, 1), (1, 1))))]:
        pad = kwargs.get("input_padding")
        stock_kwargs = {k: v for k, v in kwargs.items() if k != "input_padding"}
        stock = _then(stock_class, stock_act, pad)(*args, **stock_kwargs)
        twin = twin_class(*args, input_activation=value, **kwargs)
        compare(stock, twin, (2, 11, 9, 4), compiled, dtype="float64", rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("act", ["hard_swish", "relu6"])
def test_a_conv_grouped_per_channel_matches_stock_in_float64(act, compiled, float64):
    """One group per channel (a depthwise conv written as a grouped Conv2D, keras-hub's
    MobileNetV3): run by the depthwise kernels, exact against the grouped stock conv."""
    value = elementwise.serialize(ACTIVATIONS[act]())
    for kwargs in (dict(strides=2, padding="valid", input_padding=((1, 1), (1, 1))),
                   dict(padding="same", use_bias=True)):
        pad = kwargs.get("input_padding")
        stock_kwargs = {k: v for k, v in kwargs.items() if k != "input_padding"}
        stock = _then(keras.layers.Conv2D, elementwise.deserialize(value), pad)(
            4, 3, groups=4, **stock_kwargs)
        twin = ActivationConv2D(4, 3, groups=4, input_activation=value, **kwargs)
        compare(stock, twin, (2, 11, 9, 4), compiled, dtype="float64", rtol=1e-10, atol=1e-10)


def test_a_grouped_twin_takes_only_one_group_per_channel():
    with pytest.raises(ValueError, match="groups=filters"):
        ActivationConv2D(4, 3, groups=2)
    twin = ActivationConv2D(4, 3, groups=4)
    with pytest.raises(ValueError, match="one map of 4 channels and no scale"):
        twin(tf.ones((1, 5, 5, 4)), scale=tf.ones((1, 1, 1, 4)))


def test_activation_is_run_again_only_after_the_output_gradient_arrives():
    """TF's own swish gradient (sigmoid of the input) needs no incoming gradient,
    so TF runs it, and keeps it, during the forward pass. The twin's activation and
    its gradient wait for dy: every Sigmoid of the traced step descends from the
    step's output gradient, except the forward pass's one."""
    layer = ActivationConv2D(4, 1, input_activation="swish")
    shape = (2, 9, 7, 3)
    layer.build(shape)
    ops = training_ops(layer, shape)
    sigmoids = [op for op in ops if op.type == "Sigmoid"]
    gradient_ops = [op for op in ops if op.type == "Conv2DBackpropFilter"]
    assert len(sigmoids) >= 2 and gradient_ops
    forward = [op for op in sigmoids if not any(
        o.type.startswith("Identity") and o.control_inputs for o in ancestors(op))]
    assert len(forward) == 1, [op.name for op in sigmoids]


def test_activation_twins_round_trip_through_config():
    for value in ("swish", elementwise.serialize(keras.layers.ReLU(6.0))):
        layer = ActivationDepthwiseConv2D(3, input_activation=value,
                                          input_padding=((1, 1), (1, 1)))
        clone = ActivationDepthwiseConv2D.from_config(layer.get_config())
        assert clone.input_activation == value
        x = tf.constant(np.linspace(-8, 8, 4 * 5 * 5 * 2).reshape(4, 5, 5, 2), tf.float32)
        clone.build(x.shape)
        layer.build(x.shape)
        clone.set_weights(layer.get_weights())
        np.testing.assert_array_equal(clone(x).numpy(), layer(x).numpy())
    conv = ActivationConv2D(3, 1, input_activation="gelu")
    assert ActivationConv2D.from_config(conv.get_config()).input_activation == "gelu"
    with pytest.raises(ValueError, match="not an elementwise activation"):
        ActivationConv2D(3, 1, input_activation="softmax")


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("act", [None, "swish"])
def test_a_channel_scale_is_multiplied_in_as_a_multiply_does(act, compiled, float64):
    """ActivationConv2D(inputs, scale=s) == Conv2D(Multiply()([act(inputs), s])), with s
    [N, 1, 1, C] (squeeze-and-excitation): output and the gradients of the input, the
    scale and the kernel, in float64. The product is rebuilt in the backward pass."""
    rng = np.random.RandomState(0)
    x, s = tf.constant(rng.randn(2, 11, 9, 4)), tf.constant(rng.rand(2, 1, 1, 4))
    stock, twin = keras.layers.Conv2D(5, 1), ActivationConv2D(5, 1, input_activation=act)
    stock.build(x.shape)
    twin.build(x.shape)
    twin.set_weights(stock.get_weights())
    stock_act = keras.activations.get(act) if act else tf.identity
    upstream = tf.constant(rng.randn(2, 11, 9, 5))

    def step(call, layer):
        def run():
            with tf.GradientTape() as tape:
                tape.watch([x, s])
                loss = tf.reduce_sum(call() * upstream)
            return [call()] + tape.gradient(loss, [x, s, layer.kernel])
        return (tf.function(run) if compiled else run)()

    want = step(lambda: stock(keras.layers.Multiply()([stock_act(x), s])), stock)
    got = step(lambda: twin(x, scale=s), twin)
    for name, a, b in zip(["output", "input", "scale", "kernel"], want, got):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-10, atol=1e-12, err_msg=name)
