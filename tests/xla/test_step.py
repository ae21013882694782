"""The training step under --jit_compile=blocks (tfseg.training.step with tfseg.xla.Blocks):
a few dozen launches instead of thousands of ops, and the same update as without XLA."""

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import TINY
from tfseg.config import Config
from tfseg.profile.timeline import profile
from tfseg.runtime import builders
from tfseg.training.loop import build_step


def _step(mode, **settings):
    config = Config.from_flat(memory_saving=True, jit_compile=mode, crop_size=(49, 65),
                              batch_size=2, dataset="cityscapes", dropout=0.0, **TINY,
                              **settings)
    strategy = builders.strategy(config)
    tf.keras.utils.set_random_seed(0)
    return build_step(config, strategy,
                      lambda norm: builders.model(config, 19, norm, training=True), "batch")


@pytest.mark.slow  # XLA compiles the tiny network's blocks: ~40 s on 2 cores
def test_a_blocks_step_updates_as_the_uncompiled_one_in_a_few_dozen_launches(tmp_path):
    images = tf.cast(tf.random.stateless_uniform((2, 49, 65, 3), (0, 1), 0, 255), tf.uint8)
    labels = tf.random.stateless_uniform((2, 49, 65), (0, 2), 0, 19, dtype=tf.int32)
    results = {}
    for mode in ("off", "blocks"):
        model, _, counter, train_step = _step(mode)
        if mode == "blocks":
            for v, value in zip(model.variables, initial):
                v.assign(value)
        else:
            initial = [v.numpy() for v in model.variables]
        loss, finite, _ = train_step((images, labels))
        after = [v.numpy() for v in model.variables]
        ops = profile(lambda: float(train_step((images, labels))[0]),
                      str(tmp_path / mode))["host"]["ops"]
        results[mode] = (float(loss), bool(finite), after, ops, int(counter.numpy()))
    (loss_a, finite_a, after_a, ops_a, count_a), (loss_b, finite_b, after_b, ops_b, count_b) = \
        results["off"], results["blocks"]
    assert finite_a and finite_b and count_a == count_b == 2
    np.testing.assert_allclose(loss_b, loss_a, rtol=1e-4)
    # The updates agree as float32 gradients of a batch-norm stack can (their float64
    # agreement is tests/xla/test_blocks.py's): a few percent of the step, all weights.
    update_a = np.concatenate([(a - i).ravel() for a, i in zip(after_a, initial)])
    update_b = np.concatenate([(b - i).ravel() for b, i in zip(after_b, initial)])
    assert np.linalg.norm(update_b - update_a) <= 0.05 * np.linalg.norm(update_a)
    assert ops_b <= 80 and ops_a > 20 * ops_b, (ops_a, ops_b)


@pytest.mark.slow  # two tiny networks' steps per case, one compiled: ~1 min each on 2 cores
@pytest.mark.parametrize("settings", [
    {"recompute": ("entry_stem", "entry_block1", "middle")},
    pytest.param({"dtype_policy": "mixed_bfloat16"}, marks=pytest.mark.full),
    pytest.param({"dtype_policy": "mixed_float16"}, marks=pytest.mark.full)],
    ids=["recompute", "mixed_bfloat16", "mixed_float16"])
def test_recompute_and_both_mixed_precisions_train_under_blocks(settings):
    """The blocks take the recomputed segments and the mixed precisions too: the first
    step's loss is the uncompiled step's, and the update is finite and moves the weights."""
    images = tf.cast(tf.random.stateless_uniform((2, 49, 65, 3), (0, 1), 0, 255), tf.uint8)
    labels = tf.random.stateless_uniform((2, 49, 65), (0, 2), 0, 19, dtype=tf.int32)
    losses = {}
    for mode in ("off", "blocks"):
        model, _, counter, train_step = _step(mode, **settings)
        if mode == "off":
            initial = [v.numpy() for v in model.variables]
        else:
            for v, value in zip(model.variables, initial):
                v.assign(value)
        loss, finite, _ = train_step((images, labels))
        losses[mode] = float(loss)
        assert bool(finite) and int(counter.numpy()) == 1, (mode, settings)
        assert any(not np.array_equal(v.numpy(), i) for v, i in zip(model.variables, initial))
    tolerance = 1e-4 if "dtype_policy" not in settings else 2e-2  # half precision's rounding
    np.testing.assert_allclose(losses["blocks"], losses["off"], rtol=tolerance)
