"""The concatenation pattern across a nested model's boundary (tfseg/memory/nested.py):
maps resized to one size and concatenated, read by a nested model that starts with a
1x1 conv (SegFormer's decoder), become one `ResizedConcatConv2D` and the nested model
is rewritten without its conv; anything else is left as it is."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg import memory
from tfseg.layers import ResizedConcatConv2D
from tfseg.memory.segments import Segment
from tests.memory.test_nested import assert_same_step_to_float32, randomised
from tests.memory.test_patterns import kept_bytes


def decoder(kernel=1, also_read=False, functional=False, shape=(13, 17, 3), width=8):
    """Three stages at 1/1, 1/2 and 1/4 size, resized by one shared `Resizing` to the
    first's size (so the first resize keeps the size), concatenated and fused by a
    nested conv -> batch norm -> ReLU, then a 1x1 classifier: SegFormer's head."""
    x = keras.Input(shape)
    stages, h = [], x
    for i in range(3):
        h = keras.layers.Conv2D(4 + i, 3, strides=1 if i == 0 else 2, padding="same",
                                name=f"stage{i}")(h)
        stages.append(keras.layers.Dense(width, name=f"linear{i}")(h))
    resize = keras.layers.Resizing(shape[0], shape[1], interpolation="bilinear", name="resize")
    concat = keras.layers.Concatenate(name="concat")([resize(s) for s in stages][::-1])
    layers = [keras.layers.Conv2D(width, kernel, use_bias=False, padding="same", name="fuse"),
              keras.layers.BatchNormalization(name="fuse_bn"), keras.layers.ReLU(name="fuse_relu")]
    if functional:
        inner_x = keras.Input(concat.shape[1:])
        h = inner_x
        for layer in layers:
            h = layer(h)
        fuse = keras.Model(inner_x, h, name="linear_fuse")
    else:
        fuse = keras.Sequential(layers, name="linear_fuse")
    h = fuse(concat)
    if also_read:
        h = keras.layers.Concatenate(name="again")([h, concat])
    return keras.Model(x, keras.layers.Conv2D(3, 1, name="classes")(h), name="segformer")


@pytest.mark.parametrize("functional", [False, True], ids=["sequential", "functional"])
def test_the_fuse_conv_takes_in_the_resized_maps_and_the_step_is_stock(float64, functional):
    model = randomised(decoder(functional=functional))
    summary = memory.changes(model)
    assert summary.upsampled == [("concat of 3 resized maps", "linear_fuse/fuse")]
    new = memory.rewrite(model)
    (conv,) = [l for l in new._flatten_layers() if isinstance(l, ResizedConcatConv2D)]
    # Parts reversed, as concatenated; the first stage's resize keeps its size.
    assert conv.name == "fuse" and conv.input_sizes == [[13, 17, "bilinear"]] * 2 + [None]
    assert "fuse" not in [l.name for l in new.get_layer("linear_fuse").layers]
    assert "fuse" in [l.name for l in model.get_layer("linear_fuse").layers]  # the user's
    assert sorted(w.path for w in new.weights) == sorted(w.path for w in model.weights)
    images = tf.constant(np.random.RandomState(0).rand(2, 13, 17, 3))
    assert_same_step_to_float32(model, new, images)


def test_the_rewritten_decoder_does_not_keep_the_concatenation():
    model = decoder(shape=(32, 32, 3), width=16)
    images = tf.constant(np.random.RandomState(0).rand(2, 32, 32, 3).astype("float32"))
    concatenation = 2 * 32 * 32 * 3 * 16 * 4
    assert kept_bytes(model, images) - kept_bytes(memory.rewrite(model), images) >= \
        concatenation // 2


@pytest.mark.parametrize("case", ["not_1x1", "also_read", "switched_off"])
def test_anything_else_stays_as_it_is(case):
    model = decoder(kernel=3 if case == "not_1x1" else 1, also_read=case == "also_read")
    options = ({"options": memory.RewriteOptions(lean_upsampling=False)}
               if case == "switched_off" else {})
    assert memory.changes(model, **options).upsampled == []
    new = memory.rewrite(model, **options)
    assert not any(isinstance(l, ResizedConcatConv2D) for l in new._flatten_layers())
    assert new.outputs[0].shape == model.outputs[0].shape


def small(kind):
    """A concat of a map and a resized one, read by a nested model whose 1x1 conv is
    its output ("conv_only"), or that also returns its input ("returns_input"), or, in
    a recompute segment ending at the concat, that the segment builds ("segment")."""
    x = keras.Input((8, 8, 3))
    stem = keras.layers.Conv2D(4, 3, padding="same", name="stem")(x)
    a = keras.layers.Conv2D(4, 1, name="a")(stem)
    b = keras.layers.Conv2D(5, 3, strides=2, padding="same", name="b")(stem)
    concat = keras.layers.Concatenate(name="concat")([a, keras.layers.Resizing(8, 8)(b)])
    inner_x = keras.Input((8, 8, 9))
    conv = keras.layers.Conv2D(6, 1, name="fuse")(inner_x)
    if kind == "returns_input":
        both = keras.Model(inner_x, [conv, inner_x], name="inner")(concat)
        return keras.Model(x, keras.layers.Concatenate(name="out")(both))
    if kind == "conv_only":
        return keras.Model(x, keras.Model(inner_x, conv, name="inner")(concat))
    return keras.Model(x, keras.Model(inner_x, keras.layers.ReLU()(conv), name="inner")(concat))


@pytest.mark.parametrize("kind", ["conv_only", "returns_input", "segment"])
def test_a_nested_model_that_must_keep_its_conv_or_a_segment_is_left_alone(kind):
    """Where the model without its conv would not start from the conv's output, or a
    recompute segment (with branches) builds the concatenation itself, the pattern does
    not apply, and the rewrite computes what stock does."""
    model = small(kind)
    options = {"recompute": [Segment("aspp", "stem", "concat", branches=True)]} \
        if kind == "segment" else {}
    assert memory.changes(model, **options).upsampled == []
    x = tf.constant(np.random.RandomState(0).rand(2, 8, 8, 3).astype("float32"))
    np.testing.assert_allclose(memory.rewrite(model, **options)(x).numpy(),
                               model(x).numpy(), rtol=1e-5, atol=1e-6)
