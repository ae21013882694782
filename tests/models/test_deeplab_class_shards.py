import keras
import numpy as np

from tfseg.memory import variables_by_path
from tfseg.models import DeepLabV3Plus
from tests.conftest import TINY


def starting_weights(class_shards):
    keras.utils.set_random_seed(0)
    model = DeepLabV3Plus(**TINY, class_shards=class_shards).build(7)
    return {path: v.numpy() for path, v in variables_by_path(model).items()}


def test_the_sharded_head_starts_from_the_stock_weights_for_one_seed():
    # The docs promise the same weights either way: the sharded head must draw its
    # initialiser's seed where the stock conv does, after the decoder's layers.
    stock, sharded = starting_weights(0), starting_weights(4)
    assert sorted(stock) == sorted(sharded)
    assert stock["logits/kernel"].shape == (1, 1, 32, 7)
    differ = [path for path in stock if not np.array_equal(stock[path], sharded[path])]
    assert differ == []
