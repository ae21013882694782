"""The pattern across a nested model's boundary (tfseg/memory/nested.py): a backbone
ending in an upsampling, read only by a 1x1 conv in the task model, is rewritten without
it and the conv takes it in (`UpsampledConv2D`); anything else is left as it is."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg import memory
from tfseg.layers import UpsampledConv2D
from tests.memory.test_patterns import kept_bytes
from tests.memory.test_rewrite import assert_same_training_step, step_of, stock_step_of


def backbone(interpolation="bilinear", also_used=False, shape=(9, 11, 3)):
    x = keras.Input(shape)
    h = keras.layers.Conv2D(8, 3, strides=2, padding="same", name="stem")(x)
    h = keras.layers.BatchNormalization(name="stem_bn")(h)
    h = keras.layers.ReLU(name="stem_relu")(h)
    up = keras.layers.UpSampling2D(2, interpolation=interpolation, name="head_upsampling")(h)
    if also_used:
        up = keras.layers.Add(name="again")([up, up])
    return keras.Model(x, up, name="backbone")


def task(inner, kernel=1, twice=False, also_read=False, also_output=False):
    x = keras.Input(inner.inputs[0].shape[1:])
    features = inner(x)
    if twice:
        features = keras.layers.Concatenate(name="both")([features, inner(x)])
    logits = keras.layers.Conv2D(3, kernel, padding="same", name="classes")(features)
    if also_read:
        logits = keras.layers.Concatenate(name="with_features")([logits, features])
    outputs = [logits, features] if also_output else logits
    return keras.Model(x, outputs, name="segmenter")


def randomised(model):
    for w in model.weights:
        w.assign(np.random.RandomState(len(w.path)).uniform(0.5, 1.5, w.shape))
    return model


@pytest.mark.parametrize("interpolation", ["bilinear", "nearest"])
def test_the_upsampling_moves_into_the_conv_after_and_the_step_is_stock(float64,
                                                                         interpolation):
    model = randomised(task(backbone(interpolation, shape=(10, 12, 3))))
    summary = memory.changes(model)
    assert summary.upsampled == [("backbone/head_upsampling", "classes")]
    new = memory.rewrite(model)
    conv = new.get_layer("classes")
    assert isinstance(conv, UpsampledConv2D) and conv.input_upsampling == (2, 2)
    assert new.get_layer("backbone").outputs[0].shape[1:3] == (5, 6)  # before the upsampling
    assert model.get_layer("backbone").outputs[0].shape[1:3] == (10, 12)  # the user's
    assert sorted(w.path for w in new.weights) == sorted(w.path for w in model.weights)
    images = tf.constant(np.random.RandomState(0).rand(2, 10, 12, 3))
    if interpolation == "nearest":
        assert_same_training_step(model, new, images)
        return
    assert_same_step_to_float32(model, new, images)


def assert_same_step_to_float32(model, new, images):
    """`new`'s float64 step equals `model`'s to float32's precision: TF's bilinear
    resize computes in float32 whatever the dtype."""
    expected, got = stock_step_of(model, new, images), step_of(new, images, True)
    np.testing.assert_allclose(got.logits, expected.logits, rtol=1e-6, atol=1e-6)
    assert expected.grads.keys() == got.grads.keys()
    scale = max(float(np.abs(g).max()) for g in expected.grads.values())
    for path, g in expected.grads.items():
        np.testing.assert_allclose(got.grads[path], g, rtol=1e-5, atol=1e-6 * scale,
                                   err_msg=path)
    for path, value in got.stats.items():  # the norms' moving statistics
        np.testing.assert_allclose(value, expected.stats[path], rtol=1e-6, atol=1e-7)


def test_the_rewritten_task_model_keeps_the_small_map():
    model = task(backbone(shape=(32, 32, 3)))
    images = tf.constant(np.random.RandomState(0).rand(2, 32, 32, 3).astype("float32"))
    upsampled, small = 2 * 32 * 32 * 8 * 4, 2 * 16 * 16 * 8 * 4
    assert kept_bytes(model, images) - kept_bytes(memory.rewrite(model), images) >= \
        upsampled - small


@pytest.mark.parametrize("case", ["not_last", "not_1x1", "called_twice", "also_read",
                                  "also_output", "switched_off"])
def test_anything_else_stays_as_it_is(case):
    model = {"not_last": lambda: task(backbone(also_used=True)),
             "not_1x1": lambda: task(backbone(), kernel=3),
             "called_twice": lambda: task(backbone(), twice=True),
             "also_read": lambda: task(backbone(), also_read=True),
             "also_output": lambda: task(backbone(), also_output=True),
             "switched_off": lambda: task(backbone())}[case]()
    options = ({"options": memory.RewriteOptions(lean_upsampling=False)}
               if case == "switched_off" else {})
    assert memory.changes(model, **options).upsampled == []
    new = memory.rewrite(model, **options)
    assert type(new.get_layer("classes")) is not UpsampledConv2D
    assert [t.shape for t in new.outputs] == [t.shape for t in model.outputs]


def test_the_summary_names_what_is_changed_in_nested_models():
    """`changes` of a model holding a nested one (a built `Sequential`, a backbone cut
    where its upsampling moves out) says what `rewrite` changes inside it too (it said
    "nothing to change" for the first)."""
    inner = keras.Sequential([keras.Input((9, 11, 3)), keras.layers.Conv2D(4, 3),
                              keras.layers.BatchNormalization(), keras.layers.ReLU(),
                              keras.layers.Conv2D(4, 3)], name="inner")
    x = keras.Input((9, 11, 3))
    outer = keras.Model(x, keras.layers.Dense(2)(inner(x)))
    summary = memory.changes(outer)
    assert str(summary) == "in inner: fused 1 activation+layer pairs; made 1 norms output-only"
    assert len(summary.nested["inner"].inplace) == 1 and not summary.inplace
    # The backbone as rewritten: cut before its upsampling, its ReLU now its output, which
    # it keeps: its norm stays stock.
    assert str(memory.changes(task(backbone()))) == (
        "moved 1 upsamplings after the 1x1 conv that reads them; in backbone: kept 1 norms "
        "stock: a stock ReLU reads each and keeps its output, so an output-only norm would "
        "save nothing")
