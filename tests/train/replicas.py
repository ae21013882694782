"""Run as a script: two training steps of the memory-saving model (recompute on) on 2 mirrored
logical CPUs vs on 1 device, same global batch.

A separate process because logical devices must be configured before
TensorFlow initialises, which other tests in a pytest process have done.
Prints one JSON line {norm: {max_weight_diff, max_update, one, two}} for the norm named
on the command line (one per process: a second MirroredStrategy in the same process
clashes on collective keys).
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def train(strategy, norm, images, labels, steps=2):
    """(weights before, weights after, losses) of ``steps`` training steps."""
    from tfseg.runtime import builders
    from tfseg.training import optim
    from tfseg.config import Config
    from tfseg.training.losses import PixelLoss
    from tfseg.training.step import make_train_step

    # The memory-saving model with a recomputed block: its custom gradients are
    # what tf.distribute has not seen before (the stock layers are Keras' own).
    config = Config.from_flat(
        width_multiplier=0.125, middle_repeats=1, dropout=0.0, norm=norm, memory_saving=True,
        recompute=("middle",), crop_size=(33, 33), learning_rate=0.05, warmup_steps=0,
        train_steps=10, class_weights=(1.0,) * 18 + (3.0,))
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = builders.model(config, 19, norm)
        optimizer = optim.optimizer(config, model)
        step = tf.Variable(0, dtype=tf.int64)
    start = {v.path: v.numpy() for v in model.weights}
    loss = PixelLoss(config.optim.class_weights)
    train_step = make_train_step(strategy, model, optimizer, loss, step)
    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat(steps)
    losses = [float(train_step(batch)[0]) for batch in strategy.experimental_distribute_dataset(
        dataset)]
    return start, {v.path: v.numpy() for v in model.weights}, losses


def compare(norm, images, labels):
    """Max |weight difference| between 1 device and 2 replicas, and the largest update."""
    start, one, one_losses = train(tf.distribute.OneDeviceStrategy("/cpu:0"), norm, images,
                                   labels)
    two_start, two, two_losses = train(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]), norm,
                                       images, labels)
    # Both start from the same weights (the same seed), so any difference is the steps'.
    assert all(np.array_equal(start[k], two_start[k]) for k in start)
    diff = max(float(np.max(np.abs(one[k] - two[k]))) for k in one)
    update = max(float(np.max(np.abs(one[k] - start[k]))) for k in one)
    return dict(max_weight_diff=diff, max_update=update, one=one_losses, two=two_losses)


def main(norms):
    # float64: BN's backward cancels large terms, so in float32 the reordered sums of
    # sync BN's all-reduce show as ~1% noise in early layers (see tests/conftest.py).
    keras.config.set_floatx("float64")
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (4, 33, 33, 3)).astype("uint8")  # as the input pipeline's
    labels = rng.integers(0, 19, (4, 33, 33)).astype("int32")
    labels[:2, :20] = 255  # the first replica sees far fewer labelled pixels
    print(json.dumps({norm: compare(norm, images, labels) for norm in norms}))


if __name__ == "__main__":
    main(sys.argv[1:2])
