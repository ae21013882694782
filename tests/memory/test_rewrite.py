import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg import memory
from tfseg.layers import InplaceBatchNormalization, Recompute, ReluDepthwiseConv2D
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


def assert_same_training_step(stock, new, images, compiled=True):
    logits_a, grads_a = train_step(stock, images, compiled)
    logits_b, grads_b = train_step(new, images, compiled)
    np.testing.assert_allclose(logits_b.numpy(), logits_a.numpy(), atol=1e-5)
    assert grads_a.keys() == grads_b.keys()
    scale = max(float(np.abs(g.numpy()).max()) for g in grads_a.values())
    for path, g in grads_a.items():
        np.testing.assert_allclose(grads_b[path].numpy(), g.numpy(), rtol=1e-6, atol=1e-9 * scale,
                                   err_msg=path)
    stats = {w.path: w.numpy() for w in stock.non_trainable_weights}
    for w in new.non_trainable_weights:
        np.testing.assert_allclose(w.numpy(), stats[w.path], rtol=1e-6, atol=1e-7, err_msg=w.path)


@pytest.mark.parametrize("norm", ["batch", "group"])
@pytest.mark.parametrize("output_stride", [8, 16])
def test_rewrite_of_tfseg_model_keeps_weights_outputs_and_gradients(output_stride, norm, float64):
    stock = deeplab_v3_plus(5, output_stride=output_stride, norm=norm, dropout=0.0, **TINY)
    segments = [memory.Segment("mid", "entry_block3_add", "middle_unit1_add")]
    new = memory.rewrite(stock, recompute=segments)
    summary = memory.plan(stock)[0]
    # 21 ReLU->depthwise pairs: 3 per unit, 7 units with a leading ReLU.
    assert len(summary.fused) == 21
    assert len(summary.inplace) == sum(
        isinstance(l, (keras.layers.BatchNormalization, keras.layers.GroupNormalization))
        for l in stock.layers)
    assert isinstance(new.get_layer("entry_block1_sepconv1_depthwise"), ReluDepthwiseConv2D)
    assert isinstance(new.get_layer("mid"), Recompute)
    assert "entry_block1_sepconv1_relu" not in {l.name for l in new.layers}
    images = np.random.RandomState(0).uniform(-1, 1, (2, H, W, 3))
    assert_same_training_step(stock, new, images)


def test_checkpoints_load_either_way_between_stock_and_memory_saving(tmp_path):
    stock = deeplab_v3_plus(5, **TINY)
    saving = deeplab_v3_plus(5, memory_saving=True, **TINY)
    recompute = deeplab_v3_plus(5, memory_saving=True, recompute=("middle",), **TINY)
    assert [(w.path, w.shape) for w in saving.weights] == [(w.path, w.shape) for w in stock.weights]
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
    stock = deeplab_v3_plus(5, dropout=0.0, **TINY)
    built = deeplab_v3_plus(5, dropout=0.0, memory_saving=True,
                            recompute=("entry_block1", "middle", "exit_block1"), **TINY)
    assert {"entry_block1", "middle_unit1", "middle_unit2", "exit_block1"} <= {
        l.name for l in built.layers if isinstance(l, Recompute)}
    memory_rewritten = memory.rewrite(stock)
    memory.copy_weights(memory_rewritten, built)
    images = np.random.RandomState(0).uniform(-1, 1, (2, H, W, 3))
    assert_same_training_step(stock, built, images, compiled=False)


def test_recompute_refuses_a_block_whose_inside_is_used_elsewhere():
    with pytest.raises(ValueError, match="used outside"):
        deeplab_v3_plus(5, recompute=("entry_block2",), **TINY)
    with pytest.raises(ValueError, match="unknown blocks"):
        deeplab_v3_plus(5, recompute=("middle_flow",), **TINY)


@pytest.mark.parametrize("app", ["Xception", "MobileNetV2"])
def test_rewrite_of_keras_applications(app, float64):
    shape = (71, 71, 3) if app == "Xception" else (64, 64, 3)
    model = getattr(keras.applications, app)(weights=None, input_shape=shape, classes=7)
    summary = memory.plan(model)[0]
    # Xception: ReLU feeds SeparableConv2D; MobileNetV2: ReLU6 is not ReLU. Neither fuses.
    assert summary.fused == []
    assert len(summary.inplace) == sum(
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
    assert memory.plan(model)[0].fused == []
    single = keras.Model(x, keras.layers.DepthwiseConv2D(3, padding="same", name="d2")(
        keras.layers.Activation("relu", name="r2")(x)))
    assert memory.plan(single)[0].fused == [("r2", "d2")]
