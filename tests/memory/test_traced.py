"""Subclassed blocks taken apart from a trace of their call (`tfseg.memory.traced`):
fused across their edges, exact in float64, every variable kept by path; and each
block a trace cannot stand for kept whole, with the reason."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg import memory
from tfseg.layers import (ActivationConv2D, InplaceBatchNormalization,
                          InplaceLayerNormalization, LeanMultiHeadAttention)
from tfseg.memory import traced
from tests.memory.test_patterns import kept_bytes
from tests.memory.test_rewrite import assert_same_training_step
from tests.memory.test_transformer import Unconfigured, blocks_model

H, W = 97, 129


class Excite(keras.layers.Layer):
    """Squeeze-and-excitation as keras-hub's MobileNetV3 writes it: a product by op."""

    def __init__(self, channels, **kwargs):
        super().__init__(**kwargs)
        self.reduce = keras.layers.Conv2D(2, 1, activation="relu", name=f"{self.name}_reduce")
        self.expand = keras.layers.Conv2D(channels, 1, name=f"{self.name}_expand")
        self.gate = keras.layers.Activation("hard_sigmoid")

    def call(self, inputs):
        pooled = keras.ops.mean(inputs, axis=(1, 2), keepdims=True)
        return inputs * self.gate(self.expand(self.reduce(pooled)))


class Inverted(keras.layers.Layer):
    """An inverted residual block: expand, a depthwise conv written as a grouped Conv2D
    after a zero padding, excite, project, and the residual as `x + y`."""

    def __init__(self, channels=6, expanded=12, **kwargs):
        super().__init__(**kwargs)
        n = self.name
        self.expand = keras.layers.Conv2D(expanded, 1, use_bias=False, name=f"{n}_expand")
        self.norm1 = keras.layers.BatchNormalization(name=f"{n}_bn1")
        self.act1 = keras.layers.Activation("hard_swish")
        self.pad = keras.layers.ZeroPadding2D(1)
        self.depthwise = keras.layers.Conv2D(expanded, 3, groups=expanded, use_bias=False,
                                             name=f"{n}_depthwise")
        self.norm2 = keras.layers.BatchNormalization(name=f"{n}_bn2")
        self.act2 = keras.layers.ReLU()
        self.excite = Excite(expanded, name=f"{n}_se")
        self.project = keras.layers.Conv2D(channels, 1, use_bias=False, name=f"{n}_project")
        self.norm3 = keras.layers.BatchNormalization(name=f"{n}_bn3")

    def call(self, inputs):
        x = self.act1(self.norm1(self.expand(inputs)))
        x = self.act2(self.norm2(self.depthwise(self.pad(x))))
        return inputs + self.norm3(self.project(self.excite(x)))


def mobile_model(blocks=2):
    inputs = keras.Input((H, W, 3))
    x = keras.layers.Conv2D(6, 3, padding="same", name="stem")(inputs)
    for i in range(blocks):
        x = Inverted(name=f"block{i}")(x)
    return keras.Model(inputs, keras.layers.Conv2D(4, 1, name="head")(x))


def randomized(model):
    for w in model.weights:  # norms away from their start, so the checks are not vacuous
        w.assign(np.random.RandomState(len(w.path)).uniform(0.5, 1.5, w.shape))
    return model


def test_subclassed_blocks_are_taken_apart_fused_and_stay_exact(float64):
    model = randomized(mobile_model())
    summary = memory.changes(model)
    assert summary.traced == ["block0", "block0_se", "block1", "block1_se"]
    # The depthwise convs' norms stay stock: the ReLU after each, which the excitation
    # reads, keeps its output, so an output-only norm would keep its own beside it.
    assert len(summary.inplace) == 4 and len(summary.residual) == 2
    # the hard-swish into the grouped (depthwise) conv, the excitation's product (an op)
    # into the projection
    assert [conv for _, conv in summary.fused] == ["block0_depthwise", "block1_depthwise"]
    assert [conv for _, conv in summary.scaled] == ["block0_project", "block1_project"]
    new = memory.rewrite(model)
    assert isinstance(new.get_layer("block0_depthwise"), ActivationConv2D)
    assert isinstance(new.get_layer("block1_bn1"), InplaceBatchNormalization)
    assert sorted(w.path for w in new.weights) == sorted(w.path for w in model.weights)
    assert {id(w) for w in new.get_layer("block1_expand").weights} == \
        {id(w) for w in model.get_layer("block1").expand.weights}  # the same variables
    images = tf.constant(np.random.RandomState(0).uniform(-1, 1, (2, H, W, 3)))
    assert_same_training_step(model, new, images)


def test_taking_the_blocks_apart_saves_what_their_layers_keep():
    model = mobile_model()
    images = tf.constant(np.random.RandomState(0).rand(2, H, W, 3).astype("float32"))
    whole = kept_bytes(memory.rewrite(model, memory.RewriteOptions(trace_blocks=False)),
                       images)
    apart = kept_bytes(memory.rewrite(model), images)
    expanded_map = 2 * H * W * 12 * 4  # each block's activations into its depthwise conv
    assert whole - apart >= 2 * 2 * expanded_map


def test_blocks_a_config_cannot_copy_are_traced_frozen_norms_and_all(float64):
    """An incomplete config, a frozen norm and one that does not rebuild at all (DeiT's
    encoder) kept these blocks stock when copied from their configs; a trace calls the
    same sublayers, settings and all. Their layers' names repeat, so they go in nested."""
    model = randomized(blocks_model())
    x = keras.Input((9, 16))
    unconfigured = keras.Model(x, Unconfigured(16, name="encoder")(x))
    summary = memory.changes(model)
    assert summary.traced == ["good", "odd", "frozen"] and summary.kept_stock == []
    assert memory.changes(unconfigured).traced == ["encoder"]
    new = memory.rewrite(model)
    inner = {l.name: type(l) for name in ("odd", "frozen")
             for l in new.get_layer(name)._flatten_layers()}
    assert inner["attention"] is LeanMultiHeadAttention
    assert inner["norm"] is InplaceLayerNormalization
    assert new.get_layer("frozen").get_layer("norm").trainable is False
    assert sorted(w.path for w in new.weights) == sorted(w.path for w in model.weights)
    assert_same_training_step(model, new, tf.constant(np.random.RandomState(0).randn(2, 9, 16)))


class PassesTraining(keras.layers.Layer):
    """Hands its `training` to each sublayer, as keras-hub's HGNetV2 blocks do."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.conv = keras.layers.Conv2D(3, 1, name=f"{self.name}_conv")
        self.norm = keras.layers.BatchNormalization(name=f"{self.name}_norm")
        self.same = keras.layers.Identity(name=f"{self.name}_identity")

    def call(self, x, training=None):
        return self.same(self.norm(self.conv(x), training=training), training=training)


def test_a_block_handing_on_its_training_is_traced_and_its_shapes_inferred():
    """Keras' shape inference hands a recorded `training` to `Identity`, which takes
    none: the trace records none (the training in force reaches each layer anyway)."""
    inputs = keras.Input((7, 9, 3))
    model = keras.Model(inputs, PassesTraining(name="block")(inputs))
    new = memory.rewrite(model)
    assert memory.changes(model).traced == ["block"]
    assert new.compute_output_shape((2, 7, 9, 3)) == (2, 7, 9, 3)
    x = np.random.RandomState(0).rand(2, 7, 9, 3).astype("float32")
    np.testing.assert_allclose(new(x, training=True), model(x, training=True), atol=1e-5)


class OwnWeight(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.conv = keras.layers.Conv2D(3, 1)

    def build(self, shape):
        self.conv.build(shape)
        self.scale = self.add_weight(shape=(3,), initializer="ones", name="scale")

    def call(self, x):
        return self.conv(keras.ops.relu(x)) * self.scale


class Branches(OwnWeight):
    def build(self, shape):
        self.conv.build(shape)
        self.norm = keras.layers.BatchNormalization()

    def call(self, x, training=None):
        y = self.conv(x)
        return self.norm(y) if training else y


class RawOps(OwnWeight):
    def build(self, shape):
        self.conv.build(shape)

    def call(self, x):
        return self.conv(tf.nn.relu(x))


class ReadsShape(OwnWeight):
    def build(self, shape):
        self.conv.build(shape)

    def call(self, x):
        return keras.ops.reshape(self.conv(x), (keras.ops.shape(x)[0], -1))


@pytest.mark.parametrize("cls,shape,why", [
    (OwnWeight, (7, 9, 3), "its call reads variables that are not its sublayers'"),
    (Branches, (7, 9, 3), "its call runs other layers in training than in inference"),
    (RawOps, (7, 9, 3), "its call does not trace"),
    (ReadsShape, (None, None, 3), "its input's shape is open past the batch"),
])
def test_a_block_its_trace_cannot_stand_for_is_kept_whole_and_says_why(cls, shape, why):
    inputs = keras.Input(shape)
    model = keras.Model(inputs, cls(name="block")(keras.layers.ReLU(name="relu")(inputs)))
    _, taken, kept = traced.inline(model)
    assert taken == [] and kept["block"].startswith(why)
    summary = memory.changes(model)
    assert summary.traced == [] and summary.untraced == kept
    assert f"kept block whole, not traced: {why}" in str(summary)


class RawNorm(keras.layers.Layer):
    """A conv, a norm and a raw `tf.nn.relu`: not traced, but its config rebuilds it
    with an output-only norm inside."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.conv = keras.layers.Conv2D(3, 1, use_bias=False)
        self.norm = keras.layers.BatchNormalization()

    def call(self, x, training=None):
        return keras.ops.relu(tf.nn.relu(self.norm(self.conv(x), training=training)))


def test_a_block_rebuilt_inside_but_not_traced_still_says_in_one_line_why():
    """(Before: "made 1 more inside 1 subclassed layers", and no word of the trace.)"""
    inputs = keras.Input((7, 9, 3))
    summary = memory.changes(keras.Model(inputs, RawNorm(name="block")(inputs)))
    assert summary.inside.keys() == {"block"}
    said = [p for p in str(summary).split("; ") if p.startswith("kept block whole")]
    assert said == ["kept block whole, not traced: its call does not trace (ValueError: A "
                    "KerasTensor cannot be used as input to a TensorFlow function)"]


def test_a_trace_that_reads_a_static_batch_is_checked_by_running_it():
    """The reshape reads the batch: where it is static the trace stands."""
    inputs = keras.Input(batch_shape=(2, 7, 9, 3))
    model = keras.Model(inputs, ReadsShape(name="block")(inputs))
    flat, taken, _ = traced.inline(model)
    assert taken == ["block"]
    x = np.random.RandomState(0).rand(2, 7, 9, 3).astype("float32")
    np.testing.assert_allclose(flat(x), model(x), rtol=1e-6)


def test_a_block_whose_layers_names_are_taken_goes_in_nested_and_stays_exact(float64):
    inputs = keras.Input((7, 9, 3))
    x = keras.layers.Conv2D(12, 1, name="block0_expand")(inputs)
    model = randomized(keras.Model(inputs, Inverted(channels=12, name="block0")(x)))
    flat, taken, kept = traced.inline(model)
    assert taken == ["block0", "block0_se"] and kept == {}
    assert isinstance(flat.get_layer("block0"), keras.Model)
    assert [conv for _, conv in memory.changes(model).nested["block0"].fused] == \
        ["block0_depthwise"]
    new = memory.rewrite(model)
    assert sorted(w.path for w in new.weights) == sorted(w.path for w in model.weights)
    images = tf.constant(np.random.RandomState(0).uniform(-1, 1, (2, 7, 9, 3)))
    assert_same_training_step(model, new, images)


def test_stock_keras_and_registered_layers_are_not_traced():
    assert not traced.traceable(keras.layers.MultiHeadAttention(2, 4))
    assert not traced.traceable(keras.layers.Dense(3))  # no sublayers
    assert not traced.traceable(keras.Sequential([keras.layers.Dense(3)]))
    assert traced.traceable(Inverted())
