"""DeepLabv3+ with the many-class head (--class_shards) against the stock head with the
same weights, in float64: the loss, every gradient, a training step's predictions and
weights; its checkpoint loads into the stock model. main.py trains with it and evaluates
with the stock head; bad input is one line."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import TINY
from tests.train.conftest import TINY_FLAGS, run_main
from tfseg import memory
from tfseg.layers import ShardedLogits
from tfseg.models import deeplab_v3_plus
from tfseg.training import losses
from tfseg.training.step import make_train_step

CLASS_WEIGHTS = (1.0, 2.0, 0.5, 1.0, 3.0, 1.0, 0.7)


def _batch():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (2, 65, 97, 3)).astype(np.uint8)
    labels = rng.integers(0, 7, (2, 65, 97)).astype(np.int32)
    labels[1, :20] = 255
    return images, labels


@pytest.mark.slow
# Each stride, norm and variant in CI (26-42 s each); the third with -m full.
@pytest.mark.parametrize("output_stride,norm,memory_saving", [
    (16, "batch", True), (8, "group", False),
    pytest.param(16, "group", True, marks=pytest.mark.full)])
def test_sharded_head_trains_as_the_stock_head(float64, output_stride, norm, memory_saving):
    def build(**kwargs):
        keras.utils.set_random_seed(0)
        return deeplab_v3_plus(7, output_stride=output_stride, norm=norm,
                               memory_saving=memory_saving, **{**TINY, "dropout": 0.0},
                               **kwargs)

    stock, sharded = build(), build(class_shards=3)
    assert isinstance(sharded.get_layer("logits"), ShardedLogits)
    assert [w.path for w in stock.weights] == [w.path for w in sharded.weights]
    memory.copy_weights(stock, sharded)
    images, labels = _batch()
    results = []
    for model in (stock, sharded):
        loss_fn = losses.for_model(model, CLASS_WEIGHTS)
        inputs = tf.constant(images, tf.float64) / 127.5 - 1
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(inputs, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer = keras.optimizers.SGD(0.05, momentum=0.9)
        optimizer.build(model.trainable_variables)
        step = make_train_step(tf.distribute.get_strategy(), model, optimizer, loss_fn,
                               tf.Variable(0, dtype=tf.int64))
        step_loss, _, predictions = step((images, labels))
        results.append((float(loss), grads, float(step_loss), predictions.numpy(),
                        [w.numpy() for w in model.weights]))
    (loss_a, grads_a, step_a, pred_a, w_a), (loss_b, grads_b, step_b, pred_b, w_b) = results
    assert type(losses.for_model(sharded)) is losses.ShardedPixelLoss
    # TF's bilinear resize runs in float32 whatever the dtype: exact to its rounding.
    assert loss_b == pytest.approx(loss_a, rel=1e-6)
    scale = max(float(tf.reduce_max(tf.abs(g))) for g in grads_a)
    assert max(float(tf.reduce_max(tf.abs(a - b))) for a, b in zip(grads_a, grads_b)) < 1e-6 * scale
    assert step_b == pytest.approx(step_a, rel=1e-6)
    assert pred_a.shape == (2, 65, 97) and np.mean(pred_a == pred_b) > 0.999
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(w_a, w_b)) < 1e-6


@pytest.mark.slow
def test_main_trains_with_class_shards_and_evaluates_with_the_stock_head(data_dir, tmp_path):
    model_dir = tmp_path / "run"
    proc = run_main("--mode=train_and_eval", f"--data_dir={data_dir}",
                    f"--model_dir={model_dir}", "--train_steps=2", "--class_shards=4",
                    *TINY_FLAGS, timeout=300)
    assert "ShardedLogits" not in proc.stderr
    saved = dict(tf.train.list_variables(str(model_dir / "ckpt-2")))
    assert saved["weights/logits.Skernel/.ATTRIBUTES/VARIABLE_VALUE"][-1] == 19
    assert os.path.exists(model_dir / "eval" / "whole.json")


def test_bad_class_shards_and_devices_exit_2_in_one_line(data_dir, tmp_path):
    """What needs the data set's classes or the devices (the config's own refusals:
    tests/cli/test_main.py)."""
    common = (f"--data_dir={data_dir}", f"--model_dir={tmp_path / 'run'}", "--mode=train",
              "--train_steps=1", *TINY_FLAGS)
    cases = {
        ("--class_devices=CPU:0,GPU:7",): "--class_devices: no device 'GPU:7' here",
        ("--class_shards=20",): "--class_shards: 20 shards of 19 classes",
    }
    for args, line in cases.items():
        proc = run_main(*common, *args, check=False)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, (args, proc.stderr[-2000:])
        assert lines[0].startswith(f"tfseg: error: {line}"), lines[0]
    assert not os.path.exists(tmp_path / "run" / "checkpoint")
