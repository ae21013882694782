"""The .keras file: the model itself (float [-1, 1] images in, logits out), for Keras."""

import os

from tfseg.deploy.registry import register

KERAS_FILE = "model.keras"


@register("keras", entries=(KERAS_FILE,))
def write(model, folder, request):
    """``import tfseg`` before ``keras.models.load_model`` (for ``tfseg.layers.ResizeLike``)."""
    model.save(os.path.join(folder, KERAS_FILE))
    return f"{KERAS_FILE} (the Keras model: import tfseg, then keras.models.load_model)"
