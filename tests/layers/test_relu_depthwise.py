import numpy as np
import pytest

from tfseg.layers import ReluDepthwiseConv2D
from tests.layers.twins import ReluThenDepthwise, compare

CASES = {
    "same": dict(padding="same"),
    "stride2_valid": dict(strides=2, padding="valid"),
    "stride2_same": dict(strides=2, padding="same"),
    "dilation2": dict(padding="same", dilation_rate=2),
    "dilation3_valid": dict(padding="valid", dilation_rate=3),
    "bias_multiplier": dict(padding="same", use_bias=True, depth_multiplier=2),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_relu_depthwise_matches_stock(case, compiled):
    kwargs = CASES[case]
    compare(ReluThenDepthwise(3, **kwargs), ReluDepthwiseConv2D(3, **kwargs), (2, 13, 11, 6),
            compiled)


def test_input_gradient_is_masked_where_input_is_not_positive():
    _, (_, dx, *_) = compare(ReluThenDepthwise(3, padding="same"),
                             ReluDepthwiseConv2D(3, padding="same"), (1, 7, 9, 4), True, seed=3)
    rng = np.random.RandomState(3)
    x = rng.randn(1, 7, 9, 4).astype("float32") * 2 + 0.5
    assert (dx.numpy()[x <= 0] == 0).all()
    assert (dx.numpy()[x > 0] != 0).mean() > 0.9


def test_fused_relu_depthwise_under_mixed_bfloat16(mixed_bfloat16):
    compare(ReluThenDepthwise(3, padding="same"), ReluDepthwiseConv2D(3, padding="same"),
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
