"""The models' input range. The input pipeline (``tfseg.data.feed``) and the models both
normalise images, so the one definition lives below both packages."""

import keras


def normalize(images):
    """uint8 (or 0-255 float) images -> the model's input range [-1, 1].

    Args:
      images: uint8 or float values in [0, 255], any shape (e.g. [N, H, W, 3]).

    Returns:
      float32 of the same shape: ``images / 127.5 - 1``.

    Example::

        import numpy as np
        normalize(np.array([0, 255], np.uint8))  # [-1., 1.]
    """
    return keras.ops.cast(images, "float32") / 127.5 - 1.0
