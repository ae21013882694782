"""The training step: its step counter and skipped updates under loss scaling, weight decay,
and the progress bar's memory peak."""

import dataclasses
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.errors import NonFiniteLoss
from tfseg.train import builders, loop
from tfseg.train.config import RunConfig
from tfseg.train.step import PixelLoss, make_train_step


@pytest.fixture
def mixed_float16():
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy("float32")


def test_an_update_the_loss_scale_optimizer_skips_is_not_a_step(mixed_float16):
    config = RunConfig(width_multiplier=0.25, middle_repeats=1, dropout=0.0, warmup_steps=0,
                       train_steps=10, dtype_policy="mixed_float16")
    model = builders.model(config, 3)
    optimizer = builders.optimizer(config, model)
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    step = tf.Variable(0, dtype=tf.int64)
    train_step = make_train_step(tf.distribute.get_strategy(), model, optimizer, PixelLoss(),
                                 step)
    rng = np.random.default_rng(0)
    batch = (tf.constant(rng.uniform(-1, 1, (2, 33, 33, 3)), tf.float32),
             tf.constant(rng.integers(0, 3, (2, 33, 33)), tf.int32))
    kernel = model.get_layer("logits").kernel
    before = kernel.numpy()

    # A loss scale of 2^100 overflows float16 gradients: the optimizer skips the update.
    optimizer.dynamic_scale.assign(2.0 ** 100)
    loss, finite, _ = train_step(batch)
    assert bool(finite) and np.isfinite(float(loss))  # the loss itself is fine
    assert int(optimizer.iterations) == 0 and int(step.numpy()) == 0
    assert float(optimizer.dynamic_scale) == 2.0 ** 99  # it did see the overflow
    np.testing.assert_array_equal(kernel.numpy(), before)

    optimizer.dynamic_scale.assign(1.0)
    train_step(batch)
    assert int(optimizer.iterations) == 1 and int(step.numpy()) == 1
    assert not np.array_equal(kernel.numpy(), before)


_PEAK_SCRIPT = """
import tensorflow as tf
from tfseg.train import loop
first = tf.fill([1024, 1024], 1.0)  # 4 MiB: the allocator has something to count
label, before = loop.memory_peak()
print(label, before)
# 1 GiB above the peak so far: a resident-size high-water mark starts at the
# parent's (it is kept across fork and exec), which may be large.
x = tf.fill([int(before) + 1024, 256, 1024], 1.0)
print(*loop.memory_peak())
del x
loop.memory_peak()  # a reading restarts the peak at what is in use then: x was, now it is not
small = tf.fill([1024, 1024], 2.0)
print(*loop.memory_peak())
"""


@pytest.mark.parametrize("onednn,label", [("1", "cpu_peak_MiB"), ("0", "rss_peak_MiB")])
def test_memory_peak_reads_the_allocator_where_it_keeps_statistics(onednn, label):
    """Only oneDNN's CPU allocator keeps statistics; without it the progress bar falls
    back to the process's peak resident size, labelled as such. Either way a tensor
    larger than the peak so far raises it; the allocator's peak restarts at each reading."""
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=onednn, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT], capture_output=True, text=True,
                          env=env, timeout=120, check=True)
    (before_label, before), (after_label, after), (_, later) = (
        line.split() for line in proc.stdout.strip().splitlines()[-3:])
    assert before_label == after_label == label
    assert float(after) - float(before) >= 512, proc.stdout
    if label == "cpu_peak_MiB":
        # The allocator's peak is the step's (since the last reading), not the run's;
        # the resident size's high-water mark cannot be reset.
        assert float(later) < float(after) - 512, proc.stdout


def _one_step(config, batch, initial):
    """Kernel values after one training step of ``config`` from the weights ``initial``,
    and the step's loss."""
    model = builders.model(config, 3)
    model.set_weights(initial)
    optimizer = builders.optimizer(config, model)
    step = tf.Variable(0, dtype=tf.int64)
    train_step = make_train_step(tf.distribute.get_strategy(), model, optimizer, PixelLoss(),
                                 step, False, *builders.l2_weight_decay(config, model))
    loss, _, _ = train_step(batch)
    return model, {v.path: v.numpy() for v in model.trainable_variables}, float(loss)


@pytest.mark.parametrize("decay_type", ["l2", "decoupled"])
def test_weight_decay_moves_exactly_the_decayed_kernels(decay_type):
    """One step from the same weights on the same batch, with and without decay: the
    difference is ``-lr * wd * kernel`` on conv kernels and nothing on depthwise kernels,
    norms and biases. L2 (research/deeplab's) also adds ``wd / 2 * sum(kernel ** 2)`` to
    the loss, decoupled decay adds nothing."""
    lr, wd = 0.1, 0.05
    base = RunConfig(width_multiplier=0.25, middle_repeats=1, dropout=0.0, warmup_steps=0,
                     train_steps=10, learning_rate=lr, end_learning_rate=lr, momentum=0.9,
                     weight_decay_type=decay_type)
    rng = np.random.default_rng(1)
    batch = (tf.constant(rng.uniform(-1, 1, (2, 33, 33, 3)), tf.float32),
             tf.constant(rng.integers(0, 3, (2, 33, 33)), tf.int32))
    initial = builders.model(base, 3).get_weights()
    model, plain, plain_loss = _one_step(dataclasses.replace(base, weight_decay=0.0), batch,
                                         initial)
    _, decayed, decayed_loss = _one_step(dataclasses.replace(base, weight_decay=wd), batch,
                                         initial)
    start = dict(zip((v.path for v in model.weights), initial))
    depthwise = {layer.kernel.path for layer in model._flatten_layers()
                 if isinstance(layer, keras.layers.DepthwiseConv2D)}
    assert depthwise and any(len(start[p].shape) == 4 and p not in depthwise for p in plain)
    for path in plain:
        expected = 0.0 if path in depthwise or plain[path].ndim <= 1 else (
            -lr * wd * start[path])
        np.testing.assert_allclose(decayed[path] - plain[path], expected, atol=2e-6,
                                   err_msg=path)
    penalty = 0.5 * wd * sum(float(np.sum(start[p] ** 2)) for p in plain
                             if plain[p].ndim > 1 and p not in depthwise)
    assert decayed_loss - plain_loss == pytest.approx(
        penalty if decay_type == "l2" else 0.0, rel=1e-4, abs=1e-5)


def test_updates_skipped_in_a_row_stop_the_run(mixed_float16):
    """A step whose gradients are always NaN (the loss is finite) never advances under
    loss scaling; the loop's counter logs it and raises ``NonFiniteLoss`` (exit 3) after
    --max_skipped_updates instead of looping in silence."""
    @tf.custom_gradient
    def nan_gradient(x):
        return tf.identity(x), lambda dy: dy * float("nan")

    inputs = keras.Input((5, 7, 3))
    logits = keras.layers.Conv2D(3, 1)(inputs)
    model = keras.Model(inputs, keras.layers.Lambda(nan_gradient, dtype="float32")(logits))
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1, momentum=0.9))
    optimizer.build(model.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64)
    train_step = make_train_step(tf.distribute.get_strategy(), model, optimizer, PixelLoss(),
                                 step)
    batch = (tf.ones((2, 5, 7, 3)), tf.zeros((2, 5, 7), tf.int32))
    lines = []
    skipped = loop.SkippedUpdates(limit=12, log=lines.append)
    with pytest.raises(NonFiniteLoss, match=r"^12 updates in a row skipped .* at step 1 "
                                            r"\(--max_skipped_updates=12\).*checkpoint is ckpt-7"):
        for _ in range(100):
            loss, finite, _ = train_step(batch)
            assert bool(finite) and np.isfinite(float(loss))
            skipped(int(step.numpy()) > 0, int(step.numpy()), optimizer, "ckpt-7")
    assert int(step.numpy()) == 0 and skipped.count == 12
    assert [line.split(":")[0].strip() for line in lines] == ["step 1"] * 2  # 1st and 10th
    assert "update skipped, non-finite gradients (10 in a row" in lines[1]
    skipped(True, 1, optimizer, "ckpt-7")  # an applied update resets the count
    assert skipped.count == 0
