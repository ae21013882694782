"""The registry of subclassed blocks whose `call` the rewrite knows
(tfseg/memory/blocks.py): a registered block's Dense pair fuses in the rewritten copy,
exact in float64; an unregistered one is left alone; a pair that cannot fuse is kept
stock and the summary says why."""

import keras
import numpy as np
import tensorflow as tf

from tfseg import memory
from tfseg.layers import ActivationDense
from tfseg.memory import blocks
from tests.memory.test_patterns import kept_bytes
from tests.memory.test_rewrite import assert_same_training_step


@keras.saving.register_keras_serializable(package="tests")
class Mlp(keras.layers.Layer):
    """A transformer MLP as keras-hub writes them: Dense(act) -> Dense, built in build()."""

    def __init__(self, hidden=12, activation="gelu", **kwargs):
        super().__init__(**kwargs)
        self.hidden, self.activation = hidden, activation

    def build(self, shape):
        self.up = keras.layers.Dense(self.hidden, activation=self.activation, name="up")
        self.down = keras.layers.Dense(shape[-1], name="down")

    def call(self, x):
        return x + self.down(self.up(x))

    def get_config(self):
        return {**super().get_config(), "hidden": self.hidden, "activation": self.activation}


class Unknown(Mlp):
    """The same block, not registered: the rewrite cannot know its `call`."""


class Renamed(Mlp):
    """Registered with attribute names it does not have (a library's later version)."""


@blocks.register_block(Mlp)
def _mlp(layer):
    return [("up", "down")], None


@blocks.register_block(Renamed)
def _renamed(layer):
    return [("fc1", "fc2")], None


def model_of(block, tokens=9, width=8):
    x = keras.Input((tokens, width))
    return keras.Model(x, keras.layers.Dense(3, name="head")(block(x)))


def test_a_registered_blocks_pair_fuses_in_the_copy_and_stays_exact(float64):
    model = model_of(Mlp(name="mlp"))
    new = memory.rewrite(model)
    inner = {type(layer): layer for layer in new.get_layer("mlp")._flatten_layers()}
    assert inner[ActivationDense].name == "down" and inner[ActivationDense].input_activation \
        == "gelu"
    assert inner[keras.layers.Dense].activation is keras.activations.linear
    assert model.get_layer("mlp").up.activation is keras.activations.gelu  # the user's
    assert sorted(w.path for w in new.weights) == sorted(w.path for w in model.weights)
    assert_same_training_step(model, new, tf.constant(np.random.RandomState(0).randn(2, 9, 8)))


def test_the_fused_block_does_not_keep_the_activations_output():
    model = model_of(Mlp(hidden=32, name="mlp"), tokens=33)
    tokens = tf.constant(np.random.RandomState(0).randn(4, 33, 8).astype("float32"))
    saved = kept_bytes(model, tokens) - kept_bytes(memory.rewrite(model), tokens)
    assert saved >= 4 * 33 * 32 * 4  # the GELU's output, 4 bytes an element


def test_an_unregistered_block_and_a_pair_that_cannot_fuse_stay_stock():
    assert memory.changes(model_of(Unknown(name="mlp"))).inside == {}
    summary = memory.changes(model_of(Mlp(activation="softmax", name="mlp")))
    assert summary.inside == {}
    assert summary.kept_stock == [("mlp", "up -> down is not a stock Dense pair with an "
                                          "elementwise activation between")]
    assert memory.changes(model_of(Renamed(name="mlp"))).kept_stock == [
        ("mlp", "fc1 -> fc2 is not a stock Dense pair with an elementwise activation between")]
    summary = memory.changes(model_of(Mlp(activation="softmax", name="mlp")),
                             memory.RewriteOptions(fuse_relu_conv=False))
    assert summary.kept_stock == [] and summary.inside == {}
    new = memory.rewrite(model_of(Mlp(name="mlp")), memory.RewriteOptions(fuse_relu_conv=False))
    assert ActivationDense not in {type(layer) for layer in new._flatten_layers()}
