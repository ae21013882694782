"""The tools a Keras user would use instead of tfseg's twins, built on the same model:
each computes what stock computes, so the benchmark compares memory and time only."""

import numpy as np
import pytest
import tensorflow as tf

from tfseg.config import MEMORY_ANCHORS
from tfseg.memory import copy_weights
from tfseg.memory.weights import variables_by_path
from tfseg.profile import anchors
from tfseg.profile.anchors import RecomputeGrad, anchor_step
from tfseg.profile.step import StepConfig, build_model

STEP = StepConfig.of(height=33, width=49, batch=2, width_multiplier=0.125, middle_repeats=2,
                     dropout=0.0, num_classes=5, recompute_blocks=("entry_block1", "middle"))


def _step(model, images):
    weights = variables_by_path(model)
    paths = sorted(p for p, v in weights.items() if v.trainable)
    with tf.GradientTape() as tape:
        logits = model(images, training=True)
        loss = tf.reduce_sum(logits * logits)
    return logits, dict(zip(paths, tape.gradient(loss, [weights[p] for p in paths])))


# keras_remat_larger_than fails inside Keras 3.15 on these models in eager mode
# ("'EagerTensor' object has no attribute 'sparse'"); the benchmark records what it does.
@pytest.mark.parametrize("name", [n for n in MEMORY_ANCHORS if n != "keras_remat_larger_than"])
def test_each_anchor_trains_exactly_like_stock(name, float64):
    stock = anchors._model(STEP)
    model = build_model(anchor_step(STEP, name))
    copy_weights(stock, model)
    images = np.random.RandomState(0).uniform(-1, 1, (2, 33, 49, 3))
    expected, expected_grads = _step(stock, images)
    logits, grads = _step(model, images)
    np.testing.assert_allclose(logits, expected, rtol=1e-12, atol=1e-12)
    assert grads.keys() == expected_grads.keys()
    scale = max(float(tf.reduce_max(tf.abs(g))) for g in expected_grads.values())
    for path, grad in grads.items():
        np.testing.assert_allclose(grad, expected_grads[path], atol=1e-10 * scale, err_msg=path)


def test_anchors_apply_their_tool_to_the_recompute_segments_only():
    wrapped = build_model(anchor_step(STEP, "tf_recompute_grad"))
    assert [x.name for x in wrapped.layers if isinstance(x, RecomputeGrad)] == [
        "entry_block1", "middle_unit1", "middle_unit2"]
    listed = build_model(anchor_step(STEP, "keras_remat_list_of_layers"))
    remat = {x.name for x in listed.layers if getattr(x, "_remat_mode", None)
             and x.name in x._remat_mode.layer_names}
    assert "entry_block1_sepconv1_depthwise" in remat and "middle_unit2_add" in remat
    assert not {"entry_block2_add", "entry_conv1", "aspp_conv1x1", "logits"} & remat
    full = build_model(anchor_step(STEP, "keras_remat_full"))
    assert all(x._remat_mode.mode == "full" for x in full.layers[1:])


def test_every_anchor_name_is_a_builder_and_others_are_refused():
    for name in MEMORY_ANCHORS:
        step = anchor_step(STEP, name)
        assert step.variant == "stock" and callable(getattr(anchors, step.builder[1]))
    with pytest.raises(ValueError, match="unknown anchor 'remat'"):
        anchor_step(STEP, "remat")
