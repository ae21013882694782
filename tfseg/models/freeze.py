"""Freezing the norms for fine-tuning: research/deeplab's ``fine_tune_batch_norm=False``."""

import keras

from tfseg import keras_graph

# The twins (tfseg.layers.Inplace*) subclass these, so isinstance covers them.
NORM_TYPES = (keras.layers.BatchNormalization, keras.layers.GroupNormalization)


def freeze_norms(model):
    """Makes every norm layer of ``model`` (nested ones too) non-trainable; returns their count.

    A Keras 3 ``BatchNormalization`` with ``trainable=False`` runs in inference mode
    even when called with ``training=True``: it normalises with its moving statistics
    and leaves them alone, so it is a fixed per-channel affine. Its gamma and beta drop
    out of ``trainable_variables``: no gradient, no momentum slot, no weight decay
    (which skips norms anyway). The same holds for ``synchronized=True`` and for
    ``tfseg.layers.InplaceBatchNormalization``, whose frozen backward keeps nothing.

    Group norm has no moving statistics: a frozen one still normalises each image by
    its own statistics, and only its gamma and beta are fixed.

    The variables are the same ones either way (only ``trainable`` changes), so
    checkpoints load into frozen and unfrozen models alike. Freeze before building
    the optimizer: it makes slots for the trainable variables it is built on.
    """
    norms = [layer for layer in keras_graph.sublayers(model)
             if isinstance(layer, NORM_TYPES)]
    for layer in norms:
        layer.trainable = False
    return len(norms)
