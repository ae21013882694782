import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg import memory
from tfseg.layers import (InplaceBatchNormalization, Recompute, ReluDepthwiseConv2D,
                          SerialBranches)
from tfseg.models import deeplab_v3_plus
from tfseg.memory.kept import step_kept_bytes
from tests.conftest import TINY
from tests.memory.test_rewrite import (assert_matches_step, assert_same_training_step,
                                       deeplab_images, load, stock_step)


def pyramid(shared=False):
    """conv -> BN -> ReLU, then ASPP-like branches (one of them a separable conv, one
    a dilated ReLU -> depthwise) joined by a Concatenate, then a 1x1 conv."""
    x = keras.Input((11, 13, 4))
    y = keras.layers.ReLU(name="stem_relu")(keras.layers.BatchNormalization(name="stem_bn")(
        keras.layers.Conv2D(6, 3, name="stem")(x)))
    one = keras.layers.Conv2D(5, 1, name="one")(y)
    atrous = keras.layers.DepthwiseConv2D(3, dilation_rate=2, padding="same", name="atrous")(
        keras.layers.ReLU(name="atrous_relu")(y))
    atrous = keras.layers.BatchNormalization(name="atrous_bn")(atrous)
    sep = keras.layers.DepthwiseConv2D(3, padding="same", name="sep_depthwise")(y)
    sep = keras.layers.Conv2D(5, 1, name="sep_pointwise")(
        keras.layers.BatchNormalization(name="sep_bn")(sep))
    joined = keras.layers.Concatenate(name="join")([one, atrous, sep] + ([one] if shared else []))
    return keras.Model(x, keras.layers.Conv2D(3, 1, name="head")(joined))


def test_a_branches_segment_runs_its_branches_one_at_a_time_and_exactly(float64):
    model = pyramid()
    segment = memory.Segment("pyramid", "stem_relu", "join", branches=True)
    found = memory.changes(model, recompute=[segment])
    # The segment starts before stem_relu, which only it reads: it keeps stem_bn's
    # output (kept by that norm anyway), and each branch runs the ReLU itself.
    assert [len(nodes) for nodes in found.serial["pyramid"]] == [2, 4, 4]
    new = memory.rewrite(model, recompute=[segment])
    assert "stem_relu" not in {layer.name for layer in new.layers}
    layer = new.get_layer("pyramid")
    assert isinstance(layer, SerialBranches) and len(layer.branches) == 3
    # Inside the branches the other twins apply, as inside a recompute segment.
    assert isinstance(layer.branches[1].get_layer("atrous"), ReluDepthwiseConv2D)
    # ... and a separable branch is a fused separable block, with its twins inside.
    separable = layer.branches[2].get_layer("sep_depthwise_recompute")
    assert isinstance(separable, Recompute) and separable.tail.name == "sep_pointwise"
    assert isinstance(separable.block.get_layer("sep_bn"), InplaceBatchNormalization)
    assert "join" not in {layer.name for layer in new.layers}
    images = tf.constant(np.random.RandomState(0).randn(2, 11, 13, 4))
    assert_same_training_step(model, new, images)
    assert_same_training_step(model, new, images, compiled=False)


def test_a_branches_segment_must_end_in_a_concatenate_of_separate_branches():
    with pytest.raises(ValueError, match="'head' is not a Concatenate"):
        memory.changes(pyramid(),
                       recompute=[memory.Segment("p", "stem_relu", "head", branches=True)])
    with pytest.raises(ValueError, match="branches share layers"):
        memory.changes(pyramid(shared=True),
                       recompute=[memory.Segment("p", "stem_relu", "join", branches=True)])


# Each stride once and each norm in CI (25-36 s each); the other three with -m full.
@pytest.mark.slow
@pytest.mark.parametrize("output_stride,norm", [
    (8, "batch"), (16, "group"), (32, "batch"),
    pytest.param(8, "group", marks=pytest.mark.full),
    pytest.param(16, "batch", marks=pytest.mark.full),
    pytest.param(32, "group", marks=pytest.mark.full)])
def test_memory_saving_deeplab_runs_the_aspp_branches_one_at_a_time(output_stride, norm, float64):
    kwargs = dict(dropout=0.0, output_stride=output_stride, norm=norm, **TINY)
    expected = stock_step(output_stride, norm)
    new = deeplab_v3_plus(5, memory_saving=True, **kwargs)
    aspp = new.get_layer("aspp_branches")
    # Pooling, 1x1 and one separable branch per atrous rate (none at output stride 32).
    assert len(aspp.branches) == 2 + {8: 3, 16: 3, 32: 0}[output_stride]
    assert_matches_step(expected, load(new, expected.weights), deeplab_images())
    # Recomputing the whole ASPP instead leaves its branches to that block.
    whole = deeplab_v3_plus(5, memory_saving=True, recompute=("aspp",), **kwargs)
    assert not any(isinstance(layer, SerialBranches) for layer in whole.layers)


def residual_net(norm):
    """conv -> norm -> Add(conv shortcut -> norm) -> ReLU -> conv -> norm -> Add(identity)."""
    def make_norm(name):
        return (keras.layers.BatchNormalization(name=name) if norm == "batch"
                else keras.layers.GroupNormalization(2, name=name))

    x = keras.Input((9, 7, 4))
    a = make_norm("bn1")(keras.layers.Conv2D(6, 3, padding="same", name="c1")(x))
    s = make_norm("shortcut_bn")(keras.layers.Conv2D(6, 1, name="shortcut")(x))
    z = keras.layers.Add(name="add1")([a, s])
    b = keras.layers.Conv2D(6, 3, padding="same", name="c2")(keras.layers.ReLU(name="r")(z))
    return keras.Model(x, keras.layers.Add(name="add2")([z, make_norm("bn2")(b)]))


kept_bytes = step_kept_bytes  # the tests' name for it


@pytest.mark.parametrize("norm", ["batch", "group"])
def test_a_norm_before_a_residual_add_keeps_the_sum_not_its_output(norm, float64):
    """A residual connection y + shortcut after an output-only norm kept three
    tensors: y (the norm's backward), the sum (the next layer's) and the shortcut
    (its producer's). The folded norm returns and keeps the sum, and rebuilds y as
    sum - shortcut: one activation less per connection, within an ulp of the sum."""
    model = residual_net(norm)
    found = memory.changes(model)
    assert found.residual == [("bn1", "add1"), ("bn2", "add2")]
    new = memory.rewrite(model)
    assert {"add1", "add2"}.isdisjoint(layer.name for layer in new.layers)
    images = tf.constant(np.random.RandomState(0).randn(2, 9, 7, 4))
    assert_same_training_step(model, new, images)
    np.testing.assert_allclose(new(images, training=False), model(images, training=False))
    unfolded = memory.rewrite(model, memory.RewriteOptions(fold_residual=False))
    assert {"add1", "add2"} <= {layer.name for layer in unfolded.layers}
    activation = 2 * 9 * 7 * 6 * 8  # float64
    assert kept_bytes(new, images) == kept_bytes(unfolded, images) - 2 * activation
    for name in ("bn1", "bn2"):  # frozen: inference mode in training too
        new.get_layer(name).trainable = model.get_layer(name).trainable = False
    np.testing.assert_allclose(new(images, training=True), model(images, training=True))


def identity_block_net():
    """ResNet v1's blocks: conv -> BN -> Add(shortcut) -> ReLU, whose output feeds the
    next block's first conv and, as the identity shortcut, its Add."""
    x = keras.Input((9, 7, 4))
    z = keras.layers.Add(name="add1")([
        keras.layers.BatchNormalization(name="bn1")(keras.layers.Conv2D(6, 3, name="c1")(x)),
        keras.layers.BatchNormalization(name="shortcut_bn")(
            keras.layers.Conv2D(6, 3, name="shortcut")(x))])
    out1 = keras.layers.ReLU(name="out1")(z)
    b = keras.layers.BatchNormalization(name="bn2")(
        keras.layers.Conv2D(6, 3, padding="same", name="c2")(out1))
    return keras.Model(x, keras.layers.ReLU(name="out2")(keras.layers.Add(name="add2")([out1, b])))


def test_a_block_output_relu_read_by_a_conv_and_the_next_add_is_not_kept(float64):
    """ResNet v1: the block output relu(z) was kept for the next block's first conv,
    beside z (kept by the folded norm). Now the conv takes the ReLU in, the next
    block's folded norm adds relu(z) itself (run again in its backward pass), and
    relu(z) is never kept: one activation less per block, exactly."""
    model = identity_block_net()
    found = memory.changes(model)
    assert ("out1", "c2") in found.fused and ("bn2", "add2") in found.residual
    new = memory.rewrite(model)
    assert {"out1", "add1", "add2"}.isdisjoint(layer.name for layer in new.layers)
    images = tf.constant(np.random.RandomState(0).randn(2, 9, 7, 4))
    assert_same_training_step(model, new, images)
    assert_same_training_step(model, new, images, compiled=False)
    np.testing.assert_allclose(new(images, training=False), model(images, training=False))
    unfused = memory.rewrite(model, memory.RewriteOptions(fuse_relu_conv=False))
    assert "out1" in {layer.name for layer in unfused.layers}
    activation = 2 * 7 * 5 * 6 * 8  # float64
    assert kept_bytes(new, images) == kept_bytes(unfused, images) - activation


def test_residual_adds_are_folded_only_where_the_norm_feeds_nothing_else():
    x = keras.Input((9, 7, 4))
    y = keras.layers.BatchNormalization(name="bn")(keras.layers.Conv2D(4, 1, name="c")(x))
    also_used = keras.Model(x, [keras.layers.Add(name="add")([y, x]), y])
    assert memory.changes(also_used).residual == []
    other = keras.Input((1, 1, 4))
    broadcast = keras.Model([x, other], keras.layers.Add(name="add")([y, other]))
    assert memory.changes(broadcast).residual == []
    three = keras.Model(x, keras.layers.Add(name="add")([y, x, x]))
    assert memory.changes(three).residual == []


def test_a_segment_that_starts_at_a_relu_only_it_reads_starts_before_it(float64):
    """Xception's entry block 1 starts at the stem's ReLU. Keeping that ReLU's output as
    the block's input kept a second tensor beside the norm's output; the block now
    keeps the norm's output and runs the ReLU again."""
    x = keras.Input((11, 13, 4))
    y = keras.layers.BatchNormalization(name="bn")(keras.layers.Conv2D(6, 3, name="c")(x))
    r = keras.layers.ReLU(name="r")(y)
    z = keras.layers.Conv2D(5, 1, name="c2")(keras.layers.ReLU(name="r2")(
        keras.layers.BatchNormalization(name="bn2")(keras.layers.Conv2D(6, 1, name="c1")(r))))
    out = keras.layers.Add(name="add")([z, keras.layers.Conv2D(5, 1, name="shortcut")(r)])
    model = keras.Model(x, out)
    segment = memory.Segment("block", "r", "add")
    new = memory.rewrite(model, recompute=[segment])
    block = new.get_layer("block")
    assert block.input is new.get_layer("bn").output
    assert "r" in {layer.name for layer in block.block.layers}
    images = tf.constant(np.random.RandomState(0).randn(2, 11, 13, 4))
    assert_same_training_step(model, new, images)
    # A ReLU read outside the segment too stays outside it.
    both = memory.rewrite(keras.Model(x, [out, r]), recompute=[segment])
    # (`r` is kept, not rebuilt: its `.output` is its first call's, in `model`.)
    assert both.get_layer("block").input._keras_history.operation is both.get_layer("r")


def test_an_activation_fuses_into_a_grouped_conv_only_with_one_group_per_channel(float64):
    """A depthwise conv written as a grouped Conv2D (keras-hub's MobileNetV3) takes its
    activation in; a conv of two channels a group does not."""
    x = keras.Input((11, 9, 4))
    h = keras.layers.ZeroPadding2D(1)(keras.layers.Activation("hard_swish", name="act1")(x))
    h = keras.layers.Conv2D(4, 3, groups=4, name="depthwise")(h)
    h = keras.layers.Conv2D(4, 3, groups=2, name="grouped")(keras.layers.ReLU(name="relu")(h))
    model = keras.Model(x, h)
    assert memory.changes(model).fused == [("act1", "depthwise")]
    new = memory.rewrite(model)
    assert "act1" not in {layer.name for layer in new.layers}
    assert type(new.get_layer("grouped")) is keras.layers.Conv2D
    assert_same_training_step(model, new, tf.constant(np.random.RandomState(0).randn(2, 11, 9, 4)))

