"""tfseg.models.saving: one road to a memory-saving model, for tfseg's DeepLabv3+ (built by
`DeepLabV3Plus`, planned by `deeplab_saving`) and for any functional model."""

import keras
import numpy as np

from tfseg import memory
from tfseg.layers import InplaceBatchNormalization, Recompute
from tfseg.models import DeepLabV3Plus, deeplab_saving, deeplab_v3_plus, memory_saving
from tests.conftest import TINY


def small_net():
    inputs = keras.Input((9, 7, 3))
    x = keras.layers.Conv2D(4, 3, padding="same", name="c0")(inputs)
    x = keras.layers.ReLU(name="r0")(keras.layers.BatchNormalization(name="bn")(x))
    return keras.Model(inputs, keras.layers.Conv2D(2, 1, name="c1")(x))


def test_any_model_takes_twins_segments_and_frozen_norms_by_one_function():
    model = small_net()
    paths = sorted(w.path for w in model.weights)
    assert memory_saving(model) is model  # nothing asked: the model itself
    saving = memory_saving(model, memory.RewriteOptions(),
                           segments=[memory.Segment("body", "c0", "r0")], freeze_norms=True)
    assert sorted(w.path for w in saving.weights) == paths
    assert any(isinstance(layer, Recompute) for layer in saving.layers)
    norms = [layer for layer in saving.get_layer("body").block.layers
             if isinstance(layer, keras.layers.BatchNormalization)]
    assert norms and not any(layer.trainable for layer in norms)  # frozen inside the block too


def test_the_builder_builds_stock_and_the_convenience_is_the_plan_on_it():
    network = DeepLabV3Plus(width_multiplier=TINY["width_multiplier"],
                            middle_repeats=TINY["middle_repeats"], dropout=0.0)
    stock = network.build(3)
    assert not any(isinstance(layer, (InplaceBatchNormalization, Recompute))
                   for layer in stock.layers)
    assert stock.end_points["out"] == "exit_block2_sepconv3_pointwise_relu"
    keras.utils.set_random_seed(1)
    planned = deeplab_saving(network.build(3), network, twins=True, recompute=("middle",))
    keras.utils.set_random_seed(1)
    convenience = deeplab_v3_plus(3, memory_saving=True, recompute=("middle",),
                                  width_multiplier=TINY["width_multiplier"],
                                  middle_repeats=TINY["middle_repeats"], dropout=0.0)
    assert [type(layer) for layer in planned.layers] == [type(layer) for layer in convenience.layers]
    assert "middle_unit1" in {layer.name for layer in planned.layers}  # a recomputed unit
    images = np.random.RandomState(0).uniform(-1, 1, (1, 33, 41, 3)).astype("float32")
    np.testing.assert_allclose(planned(images), convenience(images), atol=1e-6)
