"""The .keras file: the model itself (float [-1, 1] images in, logits out), for Keras; its
classes in ``tfseg_labels.json`` of its zip, which Keras leaves alone
(``tfseg.deploy.labels``)."""

import os
import zipfile

from tfseg.deploy import labels
from tfseg.deploy.registry import labelled, register

KERAS_FILE = "model.keras"


@register("keras", entries=(KERAS_FILE,))
def write(model, folder, request):
    """``import tfseg`` before ``keras.models.load_model`` (for ``tfseg.layers.ResizeLike``)."""
    model.save(os.path.join(folder, KERAS_FILE))
    return f"{KERAS_FILE} (the Keras model: import tfseg, then keras.models.load_model)"


def write_labels(path, text):
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr(labels.FILE, text)


def read_labels(path):
    try:
        with zipfile.ZipFile(path) as archive:
            if labels.FILE not in archive.namelist():
                return None
            return archive.read(labels.FILE).decode()
    except zipfile.BadZipFile as error:
        raise ValueError(f"not a .keras zip: {error}") from None


labelled("keras", write=write_labels, read=read_labels,
         accepts=lambda path: path.endswith(".keras") and os.path.isfile(path))
