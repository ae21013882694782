"""--freeze_batch_norm: frozen norms are fixed affines (stock and twins alike), and the
variables, so checkpoints, stay the same."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.config import Config
from tfseg.layers import InplaceBatchNormalization, InplaceGroupNormalization
from tfseg.models import deeplab_v3_plus, freeze_norms
from tfseg.runtime import builders, checkpoints, state as state_lib
from tfseg.training import optim
from tfseg.training.losses import PixelLoss
from tfseg.training.step import make_train_step
from tests.conftest import TINY
from tests.layers.twins import train_step as layer_step

H, W = 97, 129


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("synchronized", [False, True], ids=["batch", "sync_batch"])
def test_frozen_batch_norm_twin_equals_frozen_stock(synchronized, compiled):
    stock = keras.layers.BatchNormalization(synchronized=synchronized, momentum=0.5)
    twin = InplaceBatchNormalization(synchronized=synchronized, momentum=0.5)
    rng = np.random.RandomState(0)
    x = tf.constant(rng.randn(3, 9, 13, 5).astype("float32") * 2 + 0.5)
    stock.build(x.shape)
    for w in stock.weights:  # away from 1s and 0s; a positive variance
        w.assign(np.abs(w.numpy() + rng.randn(*w.shape).astype("float32")))
    twin.build(x.shape)
    twin.set_weights(stock.get_weights())
    before = [w.numpy() for w in stock.weights]
    freeze_norms(keras.Sequential([stock, twin]))
    assert not stock.trainable_weights and not twin.trainable_weights
    upstream = tf.constant(rng.randn(*x.shape).astype("float32"))
    y_stock, dx_stock = layer_step(stock, x, upstream, compiled)
    y_twin, dx_twin = layer_step(twin, x, upstream, compiled)
    # Inference mode: the moving statistics, not the batch's.
    inv = 1 / np.sqrt(before[3] + stock.epsilon) * before[0]
    np.testing.assert_allclose(y_stock, (x.numpy() - before[2]) * inv + before[1], rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_array_equal(y_twin, y_stock)
    np.testing.assert_array_equal(dx_twin, dx_stock)
    np.testing.assert_allclose(dx_stock, upstream.numpy() * inv, rtol=1e-6)
    for layer in (stock, twin):
        for w, value in zip(layer.weights, before):
            np.testing.assert_array_equal(w.numpy(), value, err_msg=w.path)


def _step(model, images, labels):
    """One forward/backward: logits, the input's gradient, {path: gradient}."""
    with tf.GradientTape() as tape:
        tape.watch(images)
        logits = model(images, training=True)
        loss = PixelLoss()(labels, logits)
    grads = tape.gradient(loss, [images] + model.trainable_variables)
    return logits, grads[0], {v.path: g for v, g in zip(model.trainable_variables, grads[1:])}


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["batch", "sync_batch", "group"])
def test_frozen_memory_saving_model_equals_frozen_stock(norm, float64):
    kwargs = dict(norm=norm, dropout=0.0, freeze_batch_norm=True, **TINY)
    stock = deeplab_v3_plus(5, **kwargs)
    saving = deeplab_v3_plus(5, memory_saving=True, **kwargs)
    twin_type = InplaceGroupNormalization if norm == "group" else InplaceBatchNormalization
    assert any(type(layer) is twin_type for layer in saving._flatten_layers())
    rng = np.random.RandomState(0)
    for w in stock.weights:
        w.assign(np.abs(w.numpy() + rng.uniform(0, 0.2, w.shape)))
    by_path = {w.path: w for w in saving.weights}
    for w in stock.weights:
        by_path[w.path].assign(w.numpy())
    frozen = {w.path: w.numpy() for w in stock.weights if w.path.rsplit("/", 1)[-1] in (
        "gamma", "beta", "moving_mean", "moving_variance")}
    assert frozen and not {v.path for v in stock.trainable_variables} & frozen.keys()
    images = rng.uniform(-1, 1, (2, H, W, 3))
    labels = rng.randint(0, 5, (2, H, W))
    images = tf.constant(images)
    step = tf.function(_step)
    logits_a, dx_a, grads_a = step(stock, images, labels)
    logits_b, dx_b, grads_b = step(saving, images, labels)
    np.testing.assert_allclose(logits_b, logits_a, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(dx_b, dx_a, rtol=1e-7, atol=1e-9 * np.abs(dx_a).max())
    assert grads_a.keys() == grads_b.keys()
    scale = max(float(np.abs(g).max()) for g in grads_a.values())
    for path, g in grads_a.items():
        np.testing.assert_allclose(grads_b[path], g, rtol=1e-7, atol=1e-9 * scale, err_msg=path)
    for model in (stock, saving):
        for w in model.weights:
            if w.path in frozen:
                np.testing.assert_array_equal(w.numpy(), frozen[w.path], err_msg=w.path)


@pytest.mark.slow
def test_freezing_keeps_the_variables_and_drops_norm_slots(tmp_path):
    """An unfrozen run's checkpoint resumes into a frozen one (fine-tuning a tfseg run)."""
    config = Config.from_flat(dropout=0.0, warmup_steps=0, train_steps=5, **TINY)
    frozen_config = config.replace(freeze_batch_norm=True)
    models = [builders.model(c, 3) for c in (config, frozen_config)]
    assert [(w.path, w.shape) for w in models[0].weights] == [
        (w.path, w.shape) for w in models[1].weights]
    norm_params = {w.path for w in models[0].trainable_variables} - {
        w.path for w in models[1].trainable_variables}
    assert norm_params and all(p.endswith(("/gamma", "/beta")) for p in norm_params)
    decayed = {v.path for v in optim.decayed_kernels(models[0])}
    assert decayed == {v.path for v in optim.decayed_kernels(models[1])}

    rng = np.random.default_rng(0)
    batch = (tf.constant(rng.integers(0, 256, (2, 33, 33, 3)), tf.uint8),
             tf.constant(rng.integers(0, 3, (2, 33, 33)), tf.int32))
    runs = []
    for c, model, folder in zip((config, frozen_config), models, ("a", "b")):
        optimizer = optim.optimizer(c, model)
        step = tf.Variable(0, dtype=tf.int64)
        train = make_train_step(tf.distribute.get_strategy(), model, optimizer, PixelLoss(),
                                step, False, *optim.l2_weight_decay(c, model))
        ckpts = checkpoints.Checkpoints(model, str(tmp_path / folder), optimizer=optimizer,
                                        step=step)
        runs.append((model, optimizer, step, train, ckpts))
    slots = state_lib.optimizer_state(runs[1][1], models[1])["momentum"]
    assert set(slots) == {v.path for v in models[1].trainable_variables}

    model, _, step, train, ckpts = runs[0]
    train(batch)
    saved = ckpts.save(int(step.numpy()))
    frozen_model, _, frozen_step, frozen_train, frozen_ckpts = runs[1]
    assert frozen_ckpts.restore(saved) == saved  # fewer slots than the file holds: fine
    for a, b in zip(model.weights, frozen_model.weights):
        np.testing.assert_array_equal(b.numpy(), a.numpy(), err_msg=a.path)
    stats = {w.path: w.numpy() for w in frozen_model.non_trainable_weights}
    frozen_train(batch)
    assert int(frozen_step.numpy()) == 2  # restored 1, then one update
    for w in frozen_model.non_trainable_weights:
        np.testing.assert_array_equal(w.numpy(), stats[w.path], err_msg=w.path)
