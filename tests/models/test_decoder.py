import keras
import numpy as np

from tfseg.models import LayerPolicy
from tfseg.models.decoder import decoder


def test_decoder_upsamples_to_low_level_size():
    high, low = keras.Input((4, 5, 16)), keras.Input((13, 17, 8))
    logits = decoder(high, low, LayerPolicy(), num_classes=3, filters=16, low_filters=8)
    model = keras.Model([high, low], logits)
    out = model([np.random.rand(2, 4, 5, 16), np.random.rand(2, 13, 17, 8)], training=True)
    assert out.shape == (2, 13, 17, 3)
    assert model.get_layer("decoder_projection").filters == 8
    assert model.get_layer("decoder_concat").output.shape[-1] == 16 + 8
