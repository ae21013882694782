"""tfseg.training.optim: the warm-up and polynomial-decay schedule, the kernels weight decay
applies to, and the optimizer built for a run (the decay's effect on a step:
tests/train/test_step.py)."""

import keras
import numpy as np
import pytest

from tfseg.config import Config
from tfseg.runtime import builders
from tfseg.training import optim


def test_the_schedule_warms_up_linearly_then_decays_as_keras_poly_decay():
    schedule = optim.WarmupPolyDecay(0.1, train_steps=110, warmup_steps=10, power=0.9)
    warm = [float(schedule(s)) for s in range(10)]
    np.testing.assert_allclose(warm, [0.1 * (s + 1) / 10 for s in range(10)], rtol=1e-6)
    poly = keras.optimizers.schedules.PolynomialDecay(0.1, 100, 0.0, power=0.9)
    for step in (10, 50, 109, 110, 500):
        assert float(schedule(step)) == pytest.approx(float(poly(step - 10)), rel=1e-6)
    assert optim.WarmupPolyDecay(**schedule.get_config()).get_config() == schedule.get_config()


def test_decay_takes_conv_kernels_and_leaves_depthwise_norms_and_biases():
    config = Config.from_flat(width_multiplier=0.25, middle_repeats=1, crop_size=(33, 33))
    model = builders.model(config, 3)
    decayed = {id(v) for v in optim.decayed_kernels(model)}
    depthwise = {id(layer.kernel) for layer in model._flatten_layers()
                 if isinstance(layer, keras.layers.DepthwiseConv2D)}
    assert decayed and not decayed & depthwise
    assert all(len(v.shape) > 1 for v in optim.decayed_kernels(model))
    assert len(decayed) + len(depthwise) == sum(len(v.shape) > 1
                                                for v in model.trainable_variables)


@pytest.mark.parametrize("decay_type", ["l2", "decoupled"])
def test_the_run_optimizer_is_built_sgd_with_its_decay_in_one_place(decay_type):
    config = Config.from_flat(width_multiplier=0.25, middle_repeats=1, crop_size=(33, 33),
                              weight_decay=4e-5, weight_decay_type=decay_type, momentum=0.9)
    model = builders.model(config, 3)
    sgd = optim.optimizer(config, model)
    assert type(sgd) is keras.optimizers.SGD and sgd.built and sgd.momentum == 0.9
    weight, kernels = optim.l2_weight_decay(config, model)
    if decay_type == "l2":  # a loss term: the optimizer has none
        assert sgd.weight_decay is None and weight == 4e-5 and kernels
    else:
        assert sgd.weight_decay == 4e-5 and (weight, kernels) == (0.0, [])
