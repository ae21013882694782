"""The export run: a SavedModel (uint8 image in, class map out) and a .keras file."""

import os

import tensorflow as tf

from tfseg.data.outputs import replaced_folder, require_replaceable
from tfseg.evaluation.loading import load_model
from tfseg.models import normalize

SAVED_MODEL = "saved_model"
KERAS_FILE = "model.keras"


class Segmenter(tf.Module):
    """Serving wrapper: uint8 RGB [1, H, W, 3] -> int32 class ids [1, H, W].

    Normalisation is inside, so clients send raw pixels of any size.
    """

    def __init__(self, model):
        super().__init__()
        self.model = model

    @tf.function(input_signature=[tf.TensorSpec([1, None, None, 3], tf.uint8, name="image")])
    def serve(self, image):
        logits = self.model(normalize(image), training=False)
        return {"classes": tf.argmax(logits, -1, output_type=tf.int32)}


def export(config, log=print):
    """Writes ``EXPORT_DIR/saved_model`` and ``EXPORT_DIR/model.keras``; returns EXPORT_DIR.

    The stock Keras model is exported whatever ``--memory_saving`` says: it
    holds the same weights and none of the memory-saving twins. The SavedModel
    needs nothing but TensorFlow; ``model.keras`` needs ``import tfseg`` before
    ``keras.models.load_model`` (for ``tfseg.layers.ResizeLike``).

    The export is built in a folder beside EXPORT_DIR and swapped in whole at the end.
    A non-empty EXPORT_DIR needs ``--overwrite`` (``config.run.overwrite``), and then
    must hold an export and nothing else.

    Raises:
      InputError: EXPORT_DIR is a file, is not empty (without --overwrite), holds
        other files than an export's, or cannot be written.
    """
    run = config.run
    export_dir = run.export_dir or os.path.join(run.model_dir, "export")
    require_replaceable(export_dir, "--export_dir", run.overwrite, "an export",
                        lambda name: name in (SAVED_MODEL, KERAS_FILE))
    model, _, path, _ = load_model(config, stock=True, log=log)
    module = Segmenter(model)
    with replaced_folder(export_dir, "--export_dir") as new:
        tf.saved_model.save(module, os.path.join(new, SAVED_MODEL),
                            signatures={"serving_default": module.serve})
        model.save(os.path.join(new, KERAS_FILE))
    log(f"exported {path} to {export_dir}/{SAVED_MODEL} (signature serving_default: "
        f"uint8 image [1,H,W,3] -> int32 classes [1,H,W]) and {export_dir}/{KERAS_FILE}")
    return export_dir
