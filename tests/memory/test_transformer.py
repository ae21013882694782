"""The rewrite of transformer blocks built from stock Keras layers (as ConvNeXt and
ViT-style functional models are): output-only layer norms and the MLP's activation
taken into its second Dense, exact in float64, with every path kept."""

import keras
import numpy as np
import tensorflow as tf

from tfseg import memory
from tfseg.layers import (ActivationDense, InplaceLayerNormalization, InplaceRMSNormalization,
                          LeanMultiHeadAttention)
from tests.memory.test_patterns import kept_bytes
from tests.memory.test_rewrite import assert_same_training_step


def vit_block(tokens=9, width=16, heads=2, dropped=True):
    x = keras.Input((tokens, width))
    h = keras.layers.LayerNormalization(epsilon=1e-6, name="ln1")(x)
    h = keras.layers.MultiHeadAttention(heads, width // heads, name="attention")(h, h)
    x1 = keras.layers.Add(name="add1")([x, h])
    h = keras.layers.LayerNormalization(epsilon=1e-6, name="ln2")(x1)
    h = keras.layers.Dense(4 * width, name="mlp_up")(h)
    h = keras.layers.Activation("gelu", name="mlp_gelu")(h)
    h = keras.layers.Dense(width, name="mlp_down")(h)
    x2 = keras.layers.RMSNormalization(name="rms")(keras.layers.Add(name="add2")([x1, h]))
    h = keras.layers.LayerNormalization(gamma_initializer="zeros", name="ln_zero")(x2)
    if dropped:
        h = keras.layers.MultiHeadAttention(heads, width // heads, dropout=0.1,
                                            name="dropped")(h, h)
    return keras.Model(x, keras.layers.Dense(3, name="head")(h))


def test_a_transformer_block_gets_its_twins_and_stays_exact(float64):
    model = vit_block()
    for w in model.weights:  # gamma away from its zero start, so the check is not vacuous
        w.assign(np.random.RandomState(len(w.path)).uniform(-1, 1, w.shape))
    summary = memory.changes(model)
    assert summary.layer_norms == ["ln1", "ln2", "rms"]
    assert ("mlp_gelu", "mlp_down") in summary.fused
    assert summary.attention == ["attention", "dropped"]  # dropout 0.1: its mask replayed
    assert [name for name, _ in summary.kept_stock] == ["ln_zero"]
    assert "kept ln_zero stock: gamma starts at zero" in str(summary)
    new = memory.rewrite(model)
    assert isinstance(new.get_layer("ln1"), InplaceLayerNormalization)
    assert isinstance(new.get_layer("rms"), InplaceRMSNormalization)
    assert type(new.get_layer("ln_zero")) is keras.layers.LayerNormalization
    assert isinstance(new.get_layer("attention"), LeanMultiHeadAttention)
    assert isinstance(new.get_layer("dropped"), LeanMultiHeadAttention)
    # Its dropout keeps its name: a checkpoint's random states are keyed by it.
    assert [l.name for l in new.get_layer("dropped")._flatten_layers()] == \
        [l.name for l in model.get_layer("dropped")._flatten_layers()]
    down = new.get_layer("mlp_down")
    assert isinstance(down, ActivationDense) and down.input_activation == "gelu"
    assert "mlp_gelu" not in {layer.name for layer in new.layers}
    assert sorted(w.path for w in new.weights) == sorted(w.path for w in model.weights)
    # The twin's dropout starts from the stock layer's seed state: the same masks.
    assert_same_training_step(model, new, tf.constant(np.random.RandomState(0).randn(2, 9, 16)))


def test_the_block_keeps_less():
    """The twins drop the layer norms' inputs, the GELU's output (4x the width) and the
    attention probabilities (2 heads x 33 x 33 a sample)."""
    model = vit_block(tokens=33, width=32)
    tokens = tf.constant(np.random.RandomState(0).randn(4, 33, 32).astype("float32"))
    row, probabilities = 4 * 33 * 32 * 4, 4 * 2 * 33 * 33 * 4
    saved = kept_bytes(model, tokens) - kept_bytes(memory.rewrite(model), tokens)
    assert saved >= 2 * row + 4 * row + probabilities


@keras.saving.register_keras_serializable(package="tests")
class Block(keras.layers.Layer):
    """A pre-norm transformer block as keras-hub writes them: sublayers made in build()."""

    def __init__(self, heads=2, complete_config=True, **kwargs):
        super().__init__(**kwargs)
        self.heads, self.complete_config = heads, complete_config

    def build(self, shape):
        self.norm = keras.layers.LayerNormalization(name="norm")
        self.attention = keras.layers.MultiHeadAttention(self.heads, shape[-1] // self.heads,
                                                         name="attention")
        self.dense = keras.layers.Dense(shape[-1], activation="gelu", name="dense")

    def call(self, x):
        h = self.norm(x)
        return x + self.dense(self.attention(h, h))

    def get_config(self):
        if not self.complete_config:  # from_config then makes 2 heads: other variables
            return super().get_config()
        return {**super().get_config(), "heads": self.heads}


# Where a block's trace does not stand for it, the rewrite rebuilds it from its config:
# the tests below take that way (tests/memory/test_traced.py: the same blocks traced).
REBUILT = memory.RewriteOptions(trace_blocks=False)


def blocks_model():
    x = keras.Input((9, 16))
    h = Block(name="good")(x)
    h = Block(heads=4, complete_config=False, name="odd")(h)
    h = Block(name="frozen")(h)
    model = keras.Model(x, keras.layers.Dense(3, name="head")(h))
    model.get_layer("frozen").norm.trainable = False  # a copy from its config would train it
    return model


def test_twins_go_inside_a_copy_of_a_subclassed_block_not_the_users(float64, caplog):
    """A block whose config rebuilds it ("good") is rebuilt and given copies of its
    weights; one whose config makes other variables ("odd") or other settings (the frozen
    norm of "frozen") is copied by its attributes instead, sharing its variables."""
    model = blocks_model()
    found = memory.changes(model, REBUILT)
    assert found.inside.keys() == {"good", "odd", "frozen"} and found.kept_stock == []
    with caplog.at_level("INFO", logger="tfseg.memory"):
        new = memory.rewrite(model, REBUILT)
    assert "made 6 more inside 3 subclassed layers" in caplog.text
    good, odd, frozen = (new.get_layer(name) for name in ("good", "odd", "frozen"))
    assert good.norm.gamma is not model.get_layer("good").norm.gamma  # rebuilt: copied
    assert odd.norm.gamma is model.get_layer("odd").norm.gamma  # attribute copy: shared
    assert odd.attention._query_dense is model.get_layer("odd").attention._query_dense
    assert frozen.norm.trainable is False
    for block in (good, odd, frozen):
        assert isinstance(block.norm, InplaceLayerNormalization)
        assert isinstance(block.attention, LeanMultiHeadAttention)
    assert not any(type(layer).__module__.startswith("tfseg") for layer in model._flatten_layers())
    assert sorted(w.path for w in new.weights) == sorted(w.path for w in model.weights)
    assert_same_training_step(model, new, tf.constant(np.random.RandomState(0).randn(2, 9, 16)))


@keras.saving.register_keras_serializable(package="tests")
class Unconfigured(Block):
    """A block whose config leaves out an argument its constructor needs (keras-hub's
    DeiT encoder): `from_config` raises."""

    def __init__(self, width, **kwargs):
        super().__init__(**kwargs)
        self.width = width

    def get_config(self):
        return keras.layers.Layer.get_config(self)


def test_a_block_whose_config_does_not_rebuild_is_copied_by_its_attributes():
    x = keras.Input((9, 16))
    model = keras.Model(x, Unconfigured(16, name="encoder")(x))
    found = memory.changes(model, REBUILT)
    assert found.kept_stock == [] and "made 2 more inside 1 subclassed layers" in str(found)
    new = memory.rewrite(model, REBUILT)
    encoder, stock = new.get_layer("encoder"), model.get_layer("encoder")
    assert encoder is not stock and isinstance(encoder.norm, InplaceLayerNormalization)
    assert type(stock.norm) is keras.layers.LayerNormalization  # the user's, as it was
    assert [id(w) for w in encoder.weights] == [id(w) for w in stock.weights]
