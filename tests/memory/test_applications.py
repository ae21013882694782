"""The rewrite on keras.applications models a user brings (weights=None, small inputs):
no crash, the same inference outputs, the same training-mode gradients."""

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg import memory
from tfseg.layers import (ActivationConv2D, ActivationDepthwiseConv2D, InplaceBatchNormalization,
                          Recompute)
from tests.memory.test_patterns import kept_bytes
from tests.memory.test_rewrite import train_step


def assert_same_step(stock, new, images, rtol=1e-4, compiled=True):
    """Inference outputs equal; training-mode outputs and gradients within `rtol` of
    the largest (float32: the twins sum in other orders)."""
    np.testing.assert_allclose(new(images, training=False).numpy(),
                               stock(images, training=False).numpy(), rtol=1e-5, atol=1e-6)
    logits_a, grads_a = train_step(stock, images, compiled)
    logits_b, grads_b = train_step(new, images, compiled)
    scale = float(np.abs(logits_a.numpy()).max())
    np.testing.assert_allclose(logits_b.numpy(), logits_a.numpy(), atol=rtol * scale)
    assert grads_a.keys() == grads_b.keys()  # every variable path kept
    scale = max(float(np.abs(g.numpy()).max()) for g in grads_a.values())
    for path, g in grads_a.items():
        assert grads_b[path].shape == g.shape, path
        np.testing.assert_allclose(grads_b[path].numpy(), g.numpy(), atol=rtol * scale,
                                   err_msg=path)


# MobileNetV3 and ConvNeXt make operations that are not layers (`x + 3.0` in
# hard-swish, `x * y` in squeeze-excite); the rewrite crashed on them
# ("'Add' object has no attribute 'set_weights'").
# Training-mode steps compare exactly only without dropout (no random masks).
@pytest.mark.parametrize("app, size, extra", [
    ("MobileNetV3Small", 64, {"dropout_rate": 0.0}),
    pytest.param("ConvNeXtTiny", 64, {}, marks=pytest.mark.slow)])
def test_models_with_operations_that_are_not_layers(app, size, extra):
    model = getattr(keras.applications, app)(weights=None, input_shape=(size, size, 3),
                                             classes=5, include_preprocessing=False, **extra)
    new = memory.rewrite(model)
    assert len(new.weights) == len(model.weights)
    images = np.random.RandomState(0).rand(2, size, size, 3).astype("float32")
    assert_same_step(model, new, images)


def test_a_functional_backbone_inside_a_task_model_is_rewritten_too(float64):
    # float64: at this size the last norms see 8 values a channel, and float32's
    # reordering noise grows to ~0.5% of the first conv's gradient.
    # How keras-hub builds task models: a backbone model called as a layer, then a head.
    backbone = keras.applications.MobileNetV2(weights=None, include_top=False,
                                              input_shape=(48, 48, 3), alpha=0.35)
    images = keras.Input((48, 48, 3))
    features = backbone(images)
    logits = keras.layers.Conv2D(4, 1, name="head")(features)
    model = keras.Model(images, logits)
    new = memory.rewrite(model)
    inner = new.get_layer(backbone.name)
    assert isinstance(inner, keras.Model) and inner is not backbone
    assert isinstance(inner.get_layer("bn_Conv1"), InplaceBatchNormalization)
    assert any(isinstance(layer, Recompute) for layer in inner.layers)
    assert {w.path for w in new.weights} == {w.path for w in model.weights}
    data = np.random.RandomState(0).rand(2, 48, 48, 3)
    assert_same_step(model, new, data, rtol=1e-6)


@pytest.mark.parametrize("app, conv, kind", [
    ("EfficientNetB0", "block2a_dwconv", "silu"),
    ("EfficientNetB0", "block1a_project_conv", None),  # after squeeze-excite's multiply
    ("MobileNetV3Small", "expanded_conv_3_depthwise", "hard_silu")])
def test_swish_and_hard_swish_fuse_into_the_next_conv(app, conv, kind):
    """EfficientNet's swish and MobileNetV3's hard-swish before a conv are taken into
    it, as ReLU is: the conv keeps the norm's output, not the activation's."""
    model, _ = build(app)
    fused = dict((c, a) for a, c in memory.changes(model).fused)
    if kind is None:
        assert conv not in fused
        return
    new = memory.rewrite(model)
    twin = new.get_layer(conv)
    assert isinstance(twin, (ActivationConv2D, ActivationDepthwiseConv2D))
    assert twin.input_activation == kind
    assert fused[conv] not in {layer.name for layer in new.layers}  # taken in


def test_squeeze_excite_products_are_folded_into_the_projection_conv():
    """EfficientNet's block: activation -> squeeze-excite Multiply -> 1x1 projection.
    The projection conv multiplies by the channel weights itself, so the product is
    never kept: exactly one activation (the product) less per block, by the traced
    step's kept tensors."""
    model, size = build("EfficientNetB0")
    summary = memory.changes(model)
    assert len(summary.scaled) == 16
    new = memory.rewrite(model)
    assert "block2a_se_excite" not in {layer.name for layer in new.layers}
    assert isinstance(new.get_layer("block2a_project_conv"), ActivationConv2D)
    # The same but these:
    unscaled = memory.rewrite(model, memory.RewriteOptions(fuse_relu_conv=False))
    images = tf.constant(np.random.RandomState(0).rand(2, size, size, 3).astype("float32"))
    products = sum(4 * int(np.prod(layer.output.shape[1:])) * 2 for layer in model.layers
                   if layer.name.endswith("_se_excite"))
    assert kept_bytes(new, images) == kept_bytes(unscaled, images) - products


# One constructor per keras.applications family in CI (the other families run above
# and in test_rewrite.py); every constructor with `pytest -m full`.
FAMILIES = ["DenseNet121", "EfficientNetB0", "EfficientNetV2B0", "InceptionV3", "MobileNet",
            "ResNet50", "ResNet50V2", "VGG16"]
EVERY = sorted(name for name in dir(keras.applications) if name[0].isupper())
SIZES = {"InceptionV3": 75, "InceptionResNetV2": 75, "Xception": 71}  # their smallest


def build(app):
    size = SIZES.get(app, 64)
    constructor = getattr(keras.applications, app)
    kwargs = dict(weights=None, input_shape=(size, size, 3), classes=5)
    options = inspect.signature(constructor).parameters
    if "include_preprocessing" in options:
        kwargs["include_preprocessing"] = False
    model = constructor(**kwargs)
    for layer in model._flatten_layers():
        if isinstance(layer, keras.layers.Dropout):  # random masks differ per model
            layer.rate = 0.0
    return model, size


def check_application(app, rtol, compiled):
    model, size = build(app)
    # Every twin found, unweighed: its maths is what this checks (DenseNet's and
    # ResNet v2's rewrites would otherwise be weighed, in two traced steps, and every
    # trick pays on both; the weighing: tests/memory/test_paying.py).
    new = memory.rewrite(model, memory.RewriteOptions(weigh=False))
    assert len(new.weights) == len(model.weights)
    images = np.random.RandomState(0).rand(2, size, size, 3).astype(keras.config.floatx())
    assert_same_step(model, new, images, rtol=rtol, compiled=compiled)


@pytest.mark.parametrize("app", FAMILIES)
def test_each_keras_applications_family(app, float64):
    check_application(app, rtol=1e-6, compiled=False)


@pytest.mark.full
@pytest.mark.timeout(2400)  # ConvNeXtXLarge: ~19 minutes on 2 busy cores
@pytest.mark.parametrize("app", EVERY)
def test_every_keras_applications_constructor(app, float64):
    """As the families above, compiled (eager float64 steps of the largest take many
    minutes on 2 cores). float64: in float32 another conv kernel's rounding, through
    100+ layers, moves ResNet-152's softmax outputs by more than 1e-5."""
    check_application(app, rtol=1e-6, compiled=True)


@pytest.mark.slow  # NASNet's 700 layers traced four times: ~60 s on 2 cores
@pytest.mark.parametrize("app, size, most", [
    ("NASNetMobile", 32, 0.5), pytest.param("InceptionV3", 75, 0.6, marks=pytest.mark.full)])
def test_the_rewritten_step_keeps_less_than_stocks(app, size, most):
    """No model the rewrite makes bigger: NASNetMobile's traced training step keeps
    0.42x stock's with its SeparableConv2D twins (0.96x before them, 1.02x at 128x128
    before the rewrite weighed by default), InceptionV3's at most 0.6x (0.56x; 0.70x
    before its blocks' concatenations of ReLUs were taken in by their readers,
    `relu_concat`)."""
    model = getattr(keras.applications, app)(weights=None, input_shape=(size, size, 3),
                                            classes=5)
    images = tf.constant(np.random.RandomState(0).rand(2, size, size, 3).astype("float32"))
    stock = kept_bytes(model, images)
    assert kept_bytes(memory.rewrite(model), images) <= most * stock
