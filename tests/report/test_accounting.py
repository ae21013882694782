"""What the report accounts to the optimizer: the state the training step's own
optimizer built, read from the traced step (real TF, the project's training step)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.profile.analysis import step_breakdown
from tfseg.report.compare import entry
from tfseg.training.losses import PixelLoss
from tfseg.training.step import make_train_step

CLASSES = 3


def _tiny_model():
    images = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(16, 3, padding="same", use_bias=False)(images)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    return keras.Model(images, keras.layers.Conv2D(CLASSES, 1)(x))


def _measured(analysis):
    """A measured result around a real analysis (the measured numbers play no part
    in the accounting)."""
    return {"analysis": analysis, "recompute_blocks": [], "batch": 2,
            "peak_over_base_bytes": 1000, "peak_over_base_max_bytes": 1000,
            "peak_over_base_by_process": [1000], "peak_over_base_by_step": [1000],
            "base_bytes": 100, "step_seconds": 0.1, "wall_seconds": 1.0}


def _nbytes(variables):
    return sum(v.numpy().nbytes for v in variables)


def _analysis(momentum, batch_size=2):
    """(model, optimizer, counter, step_breakdown) of the project's training step of the
    tiny model, run once."""
    model = _tiny_model()
    optimizer = keras.optimizers.SGD(0.1, momentum=momentum)
    optimizer.build(model.trainable_variables)
    counter = tf.Variable(0, dtype=tf.int64, trainable=False)
    # The update runs in a tf.cond inside strategy.run, as in training.
    step = make_train_step(tf.distribute.get_strategy(), model, optimizer, PixelLoss(), counter)
    rng = np.random.RandomState(0)
    batch = (tf.constant(rng.randint(0, 256, (batch_size, 8, 8, 3)), tf.uint8),
             tf.constant(rng.randint(0, CLASSES, (batch_size, 8, 8)), tf.int32))
    step(batch)
    return model, optimizer, counter, step_breakdown(step, (batch,), model, lambda layer: "")


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_optimizer_state_is_what_the_optimizer_built(momentum):
    model, optimizer, counter, analysis = _analysis(momentum)

    # Keras 3's SGD builds one momentum slot per trainable weight, none without
    # momentum: only its iteration count and learning rate.
    slots = len(optimizer.variables) - 2
    assert slots == (len(model.trainable_variables) if momentum else 0)
    built = _nbytes(optimizer.variables) + counter.numpy().nbytes
    assert analysis["optimizer_state_bytes"] == built

    accounted = entry(_measured(analysis))["accounted"]
    assert accounted["optimizer_slot_bytes"] == built
    gradients = _nbytes(model.trainable_variables)
    assert accounted["gradient_bytes"] == gradients
    if momentum:
        assert gradients < accounted["optimizer_slot_bytes"] < gradients + 64
    else:
        assert accounted["optimizer_slot_bytes"] < 64  # scalars only, no slot per weight
    assert accounted["total_bytes"] == (_nbytes(model.weights) + gradients + built
                                        + analysis["kept_bytes"])


def test_the_peak_by_kind_sums_to_the_estimated_peak():
    """The buffers alive at the simulated peak, by kind (kept for backward, gradients,
    other, allocator), add up to the static estimate the report quotes."""
    analysis = _analysis(0.9, batch_size=4)[3]
    kinds = analysis["peak_by_kind"]
    assert set(kinds) == {"kept_for_backward", "gradients", "other", "allocator"}
    assert min(kinds.values()) >= 0
    assert sum(kinds.values()) == analysis["estimated_peak_bytes"]
    assert 0 < kinds["kept_for_backward"] <= analysis["kept_bytes"]
    assert entry(_measured(analysis))["peak_by_kind_bytes"] == kinds
