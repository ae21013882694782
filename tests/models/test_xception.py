import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from tfseg.models import LayerPolicy, xception65, xception_features
from tfseg.models.xception import RECOMPUTABLE, end_points, recompute_segments
from tests.conftest import TINY

H, W = 97, 129  # both 32k + 1, so strided and atrous grids line up exactly


def ceil_div(a, b):
    return -(-a // b)


# Shapes only, which the norm cannot change: one norm (the others run in tests/models).
@pytest.mark.parametrize("output_stride", [8, 16, 32])
def test_feature_shapes_follow_output_stride(output_stride):
    model = xception65((H, W, 3), LayerPolicy(), output_stride, **TINY)
    out = model(np.random.rand(2, H, W, 3).astype("float32"), training=True)
    assert out["out"].shape == (2, ceil_div(H, output_stride), ceil_div(W, output_stride), 2048 // 8)
    assert out["low_level"].shape == (2, ceil_div(H, 4), ceil_div(W, 4), 256 // 8)
    assert out["stem"].shape[1:3] == (ceil_div(H, 2), ceil_div(W, 2))
    assert {"entry_block3", "middle_unit1", "middle_unit2", "exit_block1"} <= set(out)


@pytest.mark.parametrize("norm", ["batch", "sync_batch"])
@pytest.mark.parametrize("output_stride", [8, 16])
def test_atrous_features_match_strided_features(output_stride, norm):
    """The research/deeplab check: with the same weights, the dense (atrous)
    features subsampled to stride 32 equal the stride-32 features."""
    policy = LayerPolicy(norm=norm)
    nominal = xception65((H, W, 3), policy, 32, **TINY)
    dense = xception65((H, W, 3), policy, output_stride, **TINY)
    dense.set_weights(nominal.get_weights())
    images = np.random.RandomState(1).uniform(-1, 1, (1, H, W, 3)).astype("float32")
    expected = nominal(images, training=False)
    got = dense(images, training=False)
    nominal_strides = {"entry_block3": 16, "middle_unit2": 16, "exit_block1": 32, "out": 32}
    for key, stride in nominal_strides.items():
        step = stride // min(stride, output_stride)
        np.testing.assert_allclose(
            got[key].numpy()[:, ::step, ::step], expected[key].numpy(), atol=1e-4, rtol=1e-4,
            err_msg=key,
        )
    # And the test can fail: without subsampling the maps differ.
    assert got["out"].shape != expected["out"].shape


def test_full_xception65_parameter_count_and_names(reference_deeplab):
    # The backbone inside the reference DeepLabv3+ (built once per session): the same
    # xception_features graph that xception65() wraps, input to last feature.
    model = keras.Model(reference_deeplab.input,
                        reference_deeplab.get_layer("exit_block2_sepconv3_pointwise_relu").output)
    names = [layer.name for layer in model.layers]
    assert len(names) == len(set(names))
    for expected in (
        "entry_conv1",
        "entry_block2_sepconv2_pointwise_bn",
        "entry_block3_shortcut_bn",
        "middle_unit16_sepconv3_depthwise",
        "exit_block2_sepconv3_pointwise_relu",
    ):
        assert expected in names
    assert "middle_unit17_sepconv1_depthwise" not in names
    # The backbone of the 41,258,213-parameter reference DeepLabv3+.
    assert model.count_params() == 38_052_512


def test_bad_output_stride_is_rejected():
    with pytest.raises(ValueError, match="output_stride"):
        xception65(output_stride=4)


@pytest.mark.parametrize("block", ["entry_block2", "middle_flow", "middle_unit3"])
def test_recompute_segments_reject_blocks_that_are_not_recomputable(block):
    features = xception_features(keras.Input((H, W, 3)), **TINY)
    with pytest.raises(ValueError) as error:
        recompute_segments(end_points(features), ("middle", block), TINY["middle_repeats"])
    # The message names the bad block (only) and the allowed ones.
    assert f"cannot recompute [{block!r}]" in str(error.value)
    assert str(list(RECOMPUTABLE)) in str(error.value)


def test_recompute_segments_cover_every_unit_of_the_chosen_blocks():
    features = xception_features(keras.Input((H, W, 3)), **TINY)
    segments = recompute_segments(end_points(features), ("entry_block1", "middle"), TINY["middle_repeats"])
    assert [s.name for s in segments] == ["entry_block1", "middle_unit1", "middle_unit2"]
    # Each runs from the previous unit's output: the stem's, then entry block 3's.
    assert (segments[0].start, segments[1].start) == ("entry_conv2_relu", "entry_block3_add")
    assert segments[2].start == segments[1].end == "middle_unit1_add"
    # A single unit (the budget planner's groups of middle units) is one segment.
    single = recompute_segments(end_points(features), ("middle_unit2",), TINY["middle_repeats"])
    assert single == [segments[2]]


def test_the_stem_is_a_segment_from_the_padded_image():
    """"entry_stem": the two stem convs, from the padded image (the model's input
    starts no segment) to the stem's output, where entry block 1's segment starts."""
    features = xception_features(keras.Input((H, W, 3)), **TINY)
    segments = recompute_segments(end_points(features), ("entry_stem", "entry_block1"), TINY["middle_repeats"])
    assert [(s.name, s.start, s.end) for s in segments] == [
        ("entry_stem", "entry_conv1_pad", "entry_conv2_relu"),
        ("entry_block1", "entry_conv2_relu", "entry_block1_add")]


def test_the_planner_costs_the_stem_segment():
    """The budget planner and the report's anchors find a segment's layers by
    `segment_of`: the stem's convs and norms are "entry_stem"'s, or it is never costed."""
    from tfseg.models import segment_of
    assert {segment_of(n) for n in ("entry_conv1", "entry_conv1_bn", "entry_conv2_relu")} == {
        "entry_stem"}
    assert segment_of("entry_block1_sepconv1_depthwise") == "entry_block1"


def test_a_narrow_strided_shortcut_is_the_strided_convolution_exactly():
    """At width 0.125 entry block 1's shortcut reads 8 channels: it takes every second
    pixel, then a 1x1 convolution, with the kernel of the strided one it stands for."""
    model = xception65(input_shape=(None, None, 3), width_multiplier=0.125, middle_repeats=1)
    assert model.get_layer("entry_block1_shortcut").strides == (1, 1)
    assert model.get_layer("entry_block2_shortcut").strides == (2, 2)  # 16 channels
    pool = model.get_layer("entry_block1_shortcut_subsample")
    conv = model.get_layer("entry_block1_shortcut")
    for side in (48, 49):  # an even side, whose last row the strided convolution skips
        x = np.random.default_rng(side).normal(size=(2, side, side + 2, 8))
        strided = keras.ops.conv(x, conv.kernel.numpy().astype(np.float64), strides=2)
        np.testing.assert_allclose(conv(pool(x.astype(np.float32))), strided, atol=1e-5)


_ONEDNN_STEP = """
import tensorflow as tf, tfseg
model = tfseg.deeplab_v3_plus(19, width_multiplier=0.125, middle_repeats=1)
for side in (96, 128):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(model(tf.random.uniform((1, side, side, 3)), training=True))
    tape.gradient(loss, model.trainable_variables)
print("trained")
"""


def test_a_narrow_network_trains_on_even_crops_with_onednn():
    """oneDNN's kernels, as a user's CPU runs them (the suite turns them off): the filter
    gradient of a strided 1x1 convolution of 8 channels aborted the process here."""
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": "1", "MALLOC_CHECK_": "3",
           "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run([sys.executable, "-c", _ONEDNN_STEP], env=env, timeout=300,
                            capture_output=True, text=True)
    assert result.returncode == 0 and "trained" in result.stdout, result.stderr[-1500:]
