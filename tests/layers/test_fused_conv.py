import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.layers import LeanDepthwiseConv2D, ReluConv2D, ReluDepthwiseConv2D
from tfseg.layers import dilated
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
    monkeypatch.setattr(dilated, "MIN_COPY_RATIO", 0.0 if request.param == "shifted" else np.inf)
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
    if kwargs.get("dilation_rate") == 2 and os.environ.get("TF_ENABLE_ONEDNN_OPTS") == "0":
        pytest.skip("TF's own CPU kernels cannot backprop a dilated Conv2D, stock or twin")
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


def test_folded_padding_makes_no_padded_copy_and_filter_gradient_goes_first():
    """A folded ZeroPadding2D is the kernels' explicit padding: no Pad copy of relu(x)
    and no padded input gradient to slice (at 513x513 entry block 1's strided conv:
    4 x 65 MiB alive at once). The input gradient waits for the filter gradient, so
    relu(x) is free before it and its ReLU mask are made."""
    layer = ReluDepthwiseConv2D(3, strides=2, padding="valid", input_padding=((1, 1), (1, 1)))
    shape = (2, 13, 11, 6)
    layer.build(shape)
    ops = training_ops(layer, shape)
    assert not {"Pad", "PadV2", "StridedSlice"} & {op.type for op in ops}
    (input_grad,) = [op for op in ops if op.type == "DepthwiseConv2dNativeBackpropInput"]
    (filter_grad,) = [op for op in ops if op.type == "DepthwiseConv2dNativeBackpropFilter"]
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


@pytest.mark.slow
def test_property_many_random_shapes():
    rng = np.random.RandomState(11)
    for trial in range(10):
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
