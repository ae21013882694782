import collections
import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg import memory
from tfseg.layers import (
    ActivationSeparableConv2D,
    InplaceBatchNormalization,
    InplaceGroupNormalization,
    LeanDepthwiseConv2D,
    Recompute,
    ReluConv2D,
    ReluDepthwiseConv2D,
)
from tfseg.models import deeplab_v3_plus
from tests.conftest import TINY

H, W = 97, 129


def train_step(model, images, compiled=True):
    upstream = tf.constant(
        np.random.RandomState(1).randn(*model.compute_output_shape(images.shape)),
        model.outputs[0].dtype)

    def step():
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = tf.reduce_sum(logits * upstream)
        grads = tape.gradient(loss, model.trainable_variables)
        return logits, {v.path: g for v, g in zip(model.trainable_variables, grads)}

    return (tf.function(step) if compiled else step)()


Step = collections.namedtuple("Step", "weights logits grads stats")


def step_of(model, images, compiled=True):
    """One training step of `model`: its weights before, the logits, {path: gradient}
    and the non-trainable weights after (the norms' moving statistics), as numpy."""
    weights = {w.path: w.numpy() for w in model.weights}
    logits, grads = train_step(model, images, compiled)
    return Step(weights, logits.numpy(),
                {path: tf.convert_to_tensor(g).numpy() for path, g in grads.items()},
                {w.path: w.numpy() for w in model.non_trainable_weights})


def deeplab_images():
    return np.random.RandomState(0).uniform(-1, 1, (2, H, W, 3))


@functools.lru_cache(maxsize=None)
def stock_step(output_stride, norm):
    """The float64 step of the stock tiny DeepLab (no dropout) on `deeplab_images()`, the side
    every rewrite of it is compared with: computed once per (output stride, norm) and
    process, here and in test_patterns. Numpy only, so no Keras state outlives the test
    that first asks; its own seed, so the weights are the same whichever test that is."""
    assert keras.config.floatx() == "float64"
    keras.utils.set_random_seed(0)
    stock = deeplab_v3_plus(5, output_stride=output_stride, norm=norm, dropout=0.0, **TINY)
    return step_of(stock, deeplab_images())


def load(model, weights):
    """Assigns `weights` ({path: array}) to `model`, which must have exactly those paths."""
    variables = memory.variables_by_path(model)
    assert variables.keys() == weights.keys()
    for path, value in weights.items():
        variables[path].assign(value)
    return model


def stock_step_of(stock, new, images, compiled=True):
    """`stock`'s step, with `new`'s variables put back after it. A layer the rewrite keeps
    is the same layer in both models: a stock Dropout's random state goes back, so `new`
    draws the masks `stock` drew, and a stock norm's moving statistics, so `new` starts
    from the ones `stock` started from."""
    states = [(v, v.numpy()) for v in new.variables]
    expected = step_of(stock, images, compiled)
    for variable, value in states:
        variable.assign(value)
    return expected


def assert_same_training_step(stock, new, images, compiled=True):
    assert_matches_step(stock_step_of(stock, new, images, compiled), new, images, compiled)


def assert_matches_step(expected, new, images, compiled=True):
    """`new`'s step on `images` is the `expected` Step (its weights already `new`'s)."""
    got = step_of(new, images, compiled)
    np.testing.assert_allclose(got.logits, expected.logits, atol=1e-5)
    assert expected.grads.keys() == got.grads.keys()
    scale = max(float(np.abs(g).max()) for g in expected.grads.values())
    for path, g in expected.grads.items():
        np.testing.assert_allclose(got.grads[path], g, rtol=1e-6, atol=1e-9 * scale,
                                   err_msg=path)
    for path, value in got.stats.items():
        np.testing.assert_allclose(value, expected.stats[path], rtol=1e-6, atol=1e-7,
                                   err_msg=path)


MID = [memory.Segment("mid", "entry_block3_add", "middle_unit1_add")]


# What the rewrite does to the tiny DeepLab, at each stride and norm: about 2 s each. The
# float64 step of the same rewrite, below, is slow (its graphs take 15-20 s to trace).
@pytest.mark.parametrize("output_stride,norm", [(16, "batch"), (16, "group"), (8, "batch"),
                                                (8, "group")])
def test_rewrite_of_tfseg_model_twins_every_layer_it_should(output_stride, norm):
    stock = deeplab_v3_plus(5, output_stride=output_stride, norm=norm, dropout=0.0, **TINY)
    new = memory.rewrite(stock, recompute=MID)
    summary = memory.changes(stock, recompute=MID)
    # Every separable conv fuses (entry 3 x 3, middle 2 x 3, exit 2 x 3, ASPP 3,
    # decoder 2), those inside the recompute segment "mid" too.
    assert len(summary.separable) == 9 + 6 + 6 + 3 + 2
    assert ("middle_unit2_sepconv1_depthwise", "middle_unit2_sepconv1_pointwise") in summary.separable
    separable = new.get_layer("entry_block1_sepconv3_depthwise_recompute")
    assert isinstance(separable, Recompute) and separable.tail.name == "entry_block1_sepconv3_pointwise"
    # Inside a separable conv's block the single-layer twins apply too: the block
    # runs again in the backward pass, and with them its working set there is x
    # and the norm's output, not relu(x), the depthwise output and the norm's input.
    assert isinstance(separable.block.get_layer("entry_block1_sepconv3_depthwise_bn"),
                      InplaceBatchNormalization if norm == "batch" else InplaceGroupNormalization)
    assert isinstance(separable.block.get_layer("entry_block1_sepconv3_depthwise"),
                      ReluDepthwiseConv2D)
    # Every norm is output-only but those a stock ReLU reads (ASPP's): those stay stock.
    assert len(summary.inplace) + len(summary.idle_norms) == sum(
        isinstance(l, (keras.layers.BatchNormalization, keras.layers.GroupNormalization))
        for l in stock.layers)
    # ReLU -> conv: every ReLU -> depthwise (3 per unit with a leading ReLU: entry
    # 1-3, 2 middle, exit 1; the ReLUs joining separable convs in exit block 2 (2)
    # and the decoder (1)), the stem and the logits; never a separable conv's
    # pointwise tail, which runs from its backprop kernels. Entry block 1's shortcut
    # reads 8 channels at this width, so it takes every second pixel first
    # (tfseg.models.xception._conv_shortcut): its ReLU feeds that pool, not the conv.
    fused = dict(summary.fused)
    assert len(fused) == 3 * 6 + 2 + 3
    assert {"entry_conv1_relu": "entry_conv2",
            "decoder_conv2_pointwise_relu": "logits"}.items() <= fused.items()
    assert not [c for c in fused.values() if c.endswith("pointwise")]
    assert isinstance(new.get_layer("entry_block1_sepconv3_pointwise_bn"), InplaceBatchNormalization
                      if norm == "batch" else InplaceGroupNormalization)
    # Inside "mid" its separable convs are blocks of their own (each of its second
    # run's separable convs then keeps only its input), with the twins inside.
    mid = new.get_layer("mid")
    inner = mid.block.get_layer("middle_unit1_sepconv1_depthwise_recompute")
    assert isinstance(inner, Recompute) and inner.tail.name == "middle_unit1_sepconv1_pointwise"
    assert isinstance(inner.block.get_layer("middle_unit1_sepconv1_depthwise"), ReluDepthwiseConv2D)
    assert "middle_unit1_sepconv1_pointwise" not in {l.name for l in mid.block.layers}


# Each stride and each norm in CI (15-27 s each); the other two with -m full.
@pytest.mark.slow
@pytest.mark.parametrize("output_stride,norm", [
    (16, "batch"), (8, "group"),
    pytest.param(16, "group", marks=pytest.mark.full),
    pytest.param(8, "batch", marks=pytest.mark.full)])
def test_rewrite_of_tfseg_model_keeps_weights_outputs_and_gradients(output_stride, norm, float64):
    expected = stock_step(output_stride, norm)
    stock = load(deeplab_v3_plus(5, output_stride=output_stride, norm=norm, dropout=0.0, **TINY),
                 expected.weights)
    new = memory.rewrite(stock, recompute=MID)
    assert sorted(w.path for w in new.weights) == sorted(expected.weights)
    assert_matches_step(expected, new, deeplab_images())


# Each stride and each norm once: this path (fuse_separable=False) shares the
# rewrite's machinery with the one above, which runs all four.
@pytest.mark.slow
@pytest.mark.parametrize("output_stride,norm", [(8, "group"), (16, "batch")])
def test_rewrite_without_separable_fusion_uses_the_single_layer_twins(output_stride, norm, float64):
    expected = stock_step(output_stride, norm)
    stock = load(deeplab_v3_plus(5, output_stride=output_stride, norm=norm, dropout=0.0, **TINY),
                 expected.weights)
    new = memory.rewrite(stock, memory.RewriteOptions(fuse_separable=False))
    summary = memory.changes(stock, memory.RewriteOptions(fuse_separable=False))
    fused = dict(summary.fused)
    # ReLU->depthwise: 3 per unit with a leading ReLU (entry 1-3, 2 middle, exit 1), and
    # the ReLUs joining separable convs in exit block 2 (2) and the decoder (1).
    # ReLU->pointwise: exit block 2 (3), ASPP (3), decoder (2). Plus the stem's conv2.
    assert sum(c.endswith("depthwise") for c in fused.values()) == 3 * 6 + 2 + 1
    assert sum(c.endswith("pointwise") for c in fused.values()) == 3 + 3 + 2
    assert fused["entry_conv1_relu"] == "entry_conv2"
    # Dilated and not after a ReLU: ASPP's branches and exit block 2's first conv
    # (rate 2 at OS 16, 4 at OS 8).
    assert set(summary.lean) == {"aspp_sepconv1_depthwise", "aspp_sepconv2_depthwise",
                                 "aspp_sepconv3_depthwise", "exit_block2_sepconv1_depthwise"}
    # Every norm is output-only but those a stock ReLU reads (ASPP's): those stay stock.
    assert len(summary.inplace) + len(summary.idle_norms) == sum(
        isinstance(l, (keras.layers.BatchNormalization, keras.layers.GroupNormalization))
        for l in stock.layers)
    assert isinstance(new.get_layer("entry_block1_sepconv1_depthwise"), ReluDepthwiseConv2D)
    assert new.get_layer("entry_block1_sepconv3_depthwise").input_padding == ((1, 1), (1, 1))
    assert isinstance(new.get_layer("aspp_sepconv1_pointwise"), ReluConv2D)
    assert isinstance(new.get_layer("aspp_sepconv3_depthwise"), LeanDepthwiseConv2D)
    names = {l.name for l in new.layers}
    assert not {"entry_block1_sepconv1_relu", "entry_block1_sepconv3_pad"} & names
    assert_matches_step(expected, new, deeplab_images())


@pytest.mark.slow  # 10-23 s: more than its share of the fast tier's 12 minutes
def test_rewrite_without_relu_depthwise_fusion_keeps_those_pairs_stock(float64):
    expected = stock_step(16, "batch")
    stock = load(deeplab_v3_plus(5, dropout=0.0, **TINY), expected.weights)
    unfused = memory.RewriteOptions(fuse_separable=False, fuse_relu_depthwise=False)
    new = memory.rewrite(stock, unfused)
    summary = memory.changes(stock, unfused)
    # Only ReLU -> Conv2D pairs fuse: exit block 2 (3), ASPP (3), decoder (2), the
    # stem's conv2 and the logits (entry block 1's shortcut reads its subsampling pool
    # at this width: tfseg.models.xception._conv_shortcut).
    fused = dict(summary.fused)
    assert len(fused) == 3 + 3 + 2 + 2
    assert not {type(new.get_layer(c)) for c in fused.values()} - {ReluConv2D}
    for relu, depthwise in (("entry_block1_sepconv1_relu", "entry_block1_sepconv1_depthwise"),
                            ("middle_unit1_sepconv2_relu", "middle_unit1_sepconv2_depthwise"),
                            ("decoder_conv1_pointwise_relu", "decoder_conv2_depthwise")):
        assert type(new.get_layer(relu)) is keras.layers.ReLU
        assert type(new.get_layer(depthwise)) is keras.layers.DepthwiseConv2D
    # The other rewrites still apply: the dilated depthwise convs that ReLUs no
    # longer fuse become lean (exit block 2's second and third), and every norm
    # is output-only.
    assert set(summary.lean) == {"aspp_sepconv1_depthwise", "aspp_sepconv2_depthwise",
                                 "aspp_sepconv3_depthwise", *(f"exit_block2_sepconv{i}_depthwise"
                                                              for i in (1, 2, 3))}
    assert isinstance(new.get_layer("aspp_sepconv1_pointwise"), ReluConv2D)
    norm = new.get_layer("entry_block1_sepconv1_depthwise_bn")
    assert isinstance(norm, InplaceBatchNormalization)
    assert_matches_step(expected, new, deeplab_images())


def test_checkpoints_load_either_way_between_stock_and_memory_saving(tmp_path):
    stock = deeplab_v3_plus(5, **TINY)
    saving = deeplab_v3_plus(5, memory_saving=True, **TINY)
    recompute = deeplab_v3_plus(5, memory_saving=True, recompute=("middle",), **TINY)
    # Per layer the variables are identical; the model-level order may differ where
    # Keras' topological sort breaks ties differently without the fused ReLU layers.
    assert sorted((w.path, tuple(w.shape)) for w in saving.weights) == sorted(
        (w.path, tuple(w.shape)) for w in stock.weights)
    assert isinstance(saving.get_layer("middle_unit1_sepconv1_pointwise_bn"), InplaceBatchNormalization)
    rng = np.random.RandomState(0)
    for w in stock.weights:
        w.assign(w.numpy() + rng.uniform(0, 0.1, w.shape).astype("float32"))
    images = rng.uniform(-1, 1, (1, 65, 65, 3)).astype("float32")
    expected = stock(images, training=False).numpy()
    path = memory.checkpoint(stock).write(str(tmp_path / "stock"))
    for model in (saving, recompute):
        memory.checkpoint(model).read(path).assert_consumed()
        np.testing.assert_array_equal(model(images, training=False), expected)
    back = memory.checkpoint(recompute).write(str(tmp_path / "recompute"))
    fresh = deeplab_v3_plus(5, **TINY)
    memory.checkpoint(fresh).read(back).assert_consumed()
    np.testing.assert_array_equal(fresh(images, training=False), expected)
    # copy_weights is the in-memory equivalent, and it checks what it copies.
    other = deeplab_v3_plus(5, memory_saving=True, **TINY)
    memory.copy_weights(stock, other)
    np.testing.assert_array_equal(other(images, training=False), expected)
    with pytest.raises(ValueError, match="shape"):
        memory.copy_weights(deeplab_v3_plus(6, **TINY), other)


def test_built_model_with_recompute_equals_rewrite_of_stock(float64):
    expected = stock_step(16, "batch")
    stock = load(deeplab_v3_plus(5, dropout=0.0, **TINY), expected.weights)
    built = deeplab_v3_plus(5, dropout=0.0, memory_saving=True,
                            recompute=("entry_stem", "entry_block1", "middle", "exit_block1"),
                            **TINY)
    assert {"entry_stem", "entry_block1", "middle_unit1", "middle_unit2", "exit_block1"} <= {
        l.name for l in built.layers if isinstance(l, Recompute)}
    memory_rewritten = memory.rewrite(stock)
    memory.copy_weights(memory_rewritten, built)
    assert_matches_step(expected, built, deeplab_images(), compiled=False)


@pytest.mark.parametrize("output_stride", [8, 16, 32])
def test_recomputing_the_head_and_single_middle_units_is_exact(output_stride, float64):
    # The budget planner's finer segments: one middle unit, ASPP up to its
    # projection (the dropout stays outside) and the decoder's separable convs.
    kwargs = dict(dropout=0.0, output_stride=output_stride, **TINY)
    expected = stock_step(output_stride, "batch")
    stock = load(deeplab_v3_plus(5, **kwargs), expected.weights)
    built = deeplab_v3_plus(5, memory_saving=True, recompute=("middle_unit2", "aspp", "decoder"),
                            **kwargs)
    assert [l.name for l in built.layers if isinstance(l, Recompute) and l.tail is None] == [
        "middle_unit2", "aspp", "decoder"]
    assert {l.name for l in built.get_layer("aspp").block.layers} >= {
        "aspp_pool", "aspp_conv1x1", "aspp_projection_relu"}
    assert "aspp_dropout" not in {l.name for l in built.get_layer("aspp").block.layers}
    memory.copy_weights(memory.rewrite(stock), built)
    assert_matches_step(expected, built, deeplab_images(), compiled=False)


def test_recompute_refuses_a_block_whose_inside_is_used_elsewhere():
    # Entry block 2's second separable conv feeds the decoder.
    stock = deeplab_v3_plus(5, **TINY)
    segment = memory.Segment("entry_block2", "entry_block1_add", "entry_block2_add")
    with pytest.raises(ValueError, match="entry_block2_sepconv2_pointwise_bn.* is used outside"):
        memory.rewrite(stock, recompute=[segment])
    with pytest.raises(ValueError, match=r"cannot recompute \['entry_block2'\]"):
        deeplab_v3_plus(5, recompute=("entry_block2",), **TINY)


@pytest.mark.parametrize("app", ["Xception", "MobileNetV2"])
def test_rewrite_of_keras_applications(app, float64):
    shape = (71, 71, 3) if app == "Xception" else (64, 64, 3)
    model = getattr(keras.applications, app)(weights=None, input_shape=shape, classes=7)
    summary = memory.changes(model)
    # Xception: its stem ReLU->Conv2D fuses, each of its 34 SeparableConv2D layers is a
    # twin keeping only its input, and the 32 with a ReLU before them take it in;
    # MobileNetV2: each expansion's ReLU6 [-> padding] fuses into the depthwise conv
    # after it (ReLU6 run again in its backward pass), and each depthwise -> BN -> ReLU6
    # -> 1x1 projection is a separable conv. Every norm gets its twin, inside separable
    # convs too.
    if app == "Xception":
        separable = [l for l in model.layers if type(l) is keras.layers.SeparableConv2D]
        assert len(summary.separable_layers) == len(separable) == 34
        stem = ("block1_conv1_act", "block1_conv2")
        assert stem in summary.fused and len(summary.fused) == 33
        assert {conv for pair in summary.fused if pair != stem for conv in pair[1:]} < {
            l.name for l in separable}
        assert all(type(new) is ActivationSeparableConv2D for new in
                   memory.rewrite(model).layers if new.name in summary.separable_layers)
    else:
        assert len(summary.fused) == 17
        assert all(conv.endswith("depthwise") for _, conv in summary.fused)
    assert summary.lean == []
    assert len(summary.separable) == (0 if app == "Xception" else 17)
    assert len(summary.inplace) + len(summary.idle_norms) == sum(
        type(l) is keras.layers.BatchNormalization for l in model.layers) > 30
    new = memory.rewrite(model)
    images = np.random.RandomState(0).rand(2, *shape)
    logits_a, grads_a = train_step(model, images)
    logits_b, grads_b = train_step(new, images)
    np.testing.assert_allclose(logits_b.numpy(), logits_a.numpy(), atol=1e-9)
    scale = max(float(np.abs(g.numpy()).max()) for g in grads_a.values())
    for path, g in grads_a.items():
        np.testing.assert_allclose(grads_b[path].numpy(), g.numpy(), rtol=1e-6, atol=1e-9 * scale,
                                   err_msg=path)
    assert {w.path for w in new.weights} == {w.path for w in model.weights}


def test_relu_with_two_consumers_is_not_fused():
    x = keras.Input((8, 8, 4))
    r = keras.layers.ReLU(name="r")(x)
    d = keras.layers.DepthwiseConv2D(3, padding="same", name="d")(r)
    model = keras.Model(x, keras.layers.Add()([d, r]))
    assert memory.changes(model).fused == []
    pad = keras.layers.ZeroPadding2D(1, name="p2")(x)
    single = keras.Model(x, keras.layers.DepthwiseConv2D(3, name="d2")(
        keras.layers.Activation("relu", name="r2")(pad)))
    assert memory.changes(single).fused == [("r2", "d2")]
    rewritten = memory.rewrite(single)
    assert rewritten.get_layer("d2").input_padding == ((1, 1), (1, 1))
    images = np.random.RandomState(0).randn(2, 8, 8, 4).astype("float32")
    np.testing.assert_allclose(rewritten(images), single(images), atol=1e-6)


def test_a_relu_used_by_convs_and_relus_is_fused_into_each_and_not_made(float64):
    """Xception's entry block 1: `entry_conv2_relu` feeds a 1x1 conv and a ReLU (that
    of a separable conv). Each reads the norm's output instead; only a user that is
    neither (here an Add) keeps the ReLU as it is."""
    x = keras.Input((9, 11, 4))
    y = keras.layers.BatchNormalization(name="bn")(keras.layers.Conv2D(6, 3, name="c")(x))
    r = keras.layers.ReLU(name="r")(y)
    shortcut = keras.layers.Conv2D(5, 1, strides=2, name="shortcut")(r)
    d = keras.layers.DepthwiseConv2D(3, strides=2, padding="same", name="d")(
        keras.layers.ReLU(name="r_again")(r))
    out = keras.layers.Add()([shortcut, keras.layers.Conv2D(5, 1, name="pw")(
        keras.layers.BatchNormalization(name="d_bn")(d))])
    model = keras.Model(x, out)
    unfused = memory.RewriteOptions(fuse_separable=False)
    found = memory.changes(model, unfused)
    assert ("r", "shortcut") in found.fused and "r" not in {layer.name for layer in memory.rewrite(
        model, unfused).layers}
    new = memory.rewrite(model)  # the separable conv recomputes from bn's output too
    assert "r" not in {layer.name for layer in new.layers}
    images = tf.constant(np.random.RandomState(0).randn(2, 9, 11, 4))
    assert_same_training_step(model, new, images)
    # An Add among the users: the ReLU stays, fused into none of them.
    kept = keras.Model(x, keras.layers.Add()([r, keras.layers.Conv2D(6, 1, name="c2")(r)]))
    assert memory.changes(kept).fused == []
    assert "r" in {layer.name for layer in memory.rewrite(kept).layers}


def test_nested_sequentials_and_name_scopes_keep_every_path_and_the_model_its_graph(float64):
    """ConvNeXt's stem and keras-hub's SegFormer head are nested `Sequential`s, NASNet
    builds its blocks under `name_scope`s: a twin gets the path its original had, and
    a Sequential is rewritten like a functional model. Layers the rewrite keeps are the
    original's own, so a second rewrite of the same model (which now shares them) must
    see the same patterns."""
    x = keras.Input((9, 11, 3))
    with keras.name_scope("scoped"):
        y = keras.layers.BatchNormalization(name="bn")(keras.layers.Conv2D(4, 3, name="c")(x))
    block = keras.Sequential([keras.layers.ReLU(), keras.layers.Conv2D(4, 1, use_bias=False),
                              keras.layers.BatchNormalization(), keras.layers.ReLU(),
                              keras.layers.Conv2D(4, 1)])
    model = keras.Model(x, keras.layers.Conv2D(2, 1, name="head")(block(y)))
    paths = sorted(w.path for w in model.weights)
    assert "scoped/bn/gamma" in paths and any(p.startswith(block.name + "/") for p in paths)
    before = str(memory.changes(model))
    new = memory.rewrite(model)
    assert isinstance(new.get_layer("bn"), InplaceBatchNormalization)
    inner = new.get_layer(block.name)
    assert isinstance(inner, keras.Model) and inner is not block
    assert any(isinstance(layer, InplaceBatchNormalization) for layer in inner.layers)
    assert sorted(w.path for w in new.weights) == paths
    assert str(memory.changes(model)) == before
    assert sorted(w.path for w in memory.rewrite(model).weights) == paths
    assert_same_training_step(model, new, tf.constant(np.random.RandomState(0).rand(2, 9, 11, 3)))


def test_a_layer_called_in_a_model_and_in_one_nested_in_it_is_refused():
    """Each graph gets its own twin of such a norm: two variables with one path, which
    no path-keyed checkpoint could hold. The rewrite says so instead."""
    norm = keras.layers.BatchNormalization(name="shared_bn")
    inner_in = keras.Input((5, 7, 3))
    inner = keras.Model(inner_in, norm(keras.layers.Conv2D(3, 1, name="c")(inner_in)),
                        name="inner")
    x = keras.Input((5, 7, 3))
    model = keras.Model(x, keras.layers.Add(name="add")([inner(x), norm(x)]))
    with pytest.raises(ValueError, match="two variables the path 'shared_bn/"):
        memory.rewrite(model)


class _CallsPartOfItsEncoder(keras.Model):
    """A functional model that tracks its whole encoder and calls all of it but the stem,
    as keras-hub's BASNet does with its ResNet."""

    def __init__(self):
        pixels = keras.Input((None, None, 3))
        stem = keras.layers.Conv2D(4, 3, padding="same", name="enc_stem_conv")(pixels)
        stem = keras.layers.BatchNormalization(name="enc_stem_bn")(stem)
        stage = keras.layers.Conv2D(4, 3, padding="same", name="enc_stage_conv")
        encoder = keras.Model(pixels, stage(keras.layers.ReLU()(stem)), name="encoder")
        images = keras.Input((None, None, 3))
        x = keras.layers.Conv2D(4, 3, padding="same", name="own_stem_conv")(images)
        x = keras.layers.BatchNormalization(name="own_stem_bn")(x)
        x = stage(keras.layers.ReLU()(x))
        x = keras.layers.BatchNormalization(name="head_bn")(x)
        super().__init__(images, keras.layers.Conv2D(3, 1, name="logits")(
            keras.layers.ReLU()(x)), name="calls_part")
        self.encoder = encoder


def test_layers_tracked_but_never_called_keep_their_variables(tmp_path):
    """Checkpoints are keyed by path: the rewritten model holds every variable of the
    original's, those of layers it tracks and never calls too, and a checkpoint of either
    loads into the other."""
    stock = _CallsPartOfItsEncoder()
    saving = memory.rewrite(stock)
    assert isinstance(saving.get_layer("own_stem_bn"), InplaceBatchNormalization)
    assert sorted(w.path for w in saving.weights) == sorted(w.path for w in stock.weights)
    assert {layer.name for layer in saving.outside_the_graph} == {"enc_stem_conv", "enc_stem_bn"}
    images = np.random.RandomState(0).uniform(-1, 1, (2, 9, 11, 3)).astype("float32")
    for w in stock.weights:
        w.assign(w + 0.1)
    path = memory.checkpoint(stock).write(str(tmp_path / "stock"))
    memory.checkpoint(saving).read(path).assert_consumed()
    np.testing.assert_allclose(saving(images), stock(images), atol=1e-6)
    back = memory.checkpoint(saving).write(str(tmp_path / "saving"))
    memory.checkpoint(_CallsPartOfItsEncoder()).read(back).assert_consumed()
    # It trains: the variables it calls get gradients, the ones it only tracks none.
    _, grads = train_step(saving, images)
    assert {path for path, g in grads.items() if g is None} == {
        "enc_stem_conv/kernel", "enc_stem_conv/bias", "enc_stem_bn/gamma", "enc_stem_bn/beta"}
