"""The SavedModel: TF Serving's format, any image size (signature ``serving_default``); its
classes in ``assets/tfseg_labels.json`` (``tfseg.deploy.labels``)."""

import os

import tensorflow as tf

from tfseg.deploy import labels
from tfseg.deploy.registry import labelled, register, require_exported, runner
from tfseg.deploy.serving import CLASSES, INPUT, serving_function
from tfseg.errors import InputError
from tfseg.evaluation.inference import InferenceConfig

SAVED_MODEL = "saved_model"


class Segmenter(tf.Module):
    """Serving wrapper: uint8 RGB ``image`` [1, H, W, 3] -> int32 ``classes`` [1, H, W]
    (and float32 ``logits`` [1, H, W, C] with ``logits=True``), any H and W: each image
    padded to the next size ``sizes`` (an ``InferenceConfig``) maps exactly, as eval does.

    Example::

        served = tf.saved_model.load("export/saved_model").signatures["serving_default"]
        served(image=tf.zeros([1, 97, 129, 3], tf.uint8))["classes"]
    """

    def __init__(self, model, logits=False, sizes=InferenceConfig()):
        super().__init__()
        self.model = model
        self.serve = serving_function(model, [1, None, None, 3], logits, sizes)


@register("saved_model", entries=(SAVED_MODEL,))
def write(model, folder, request):
    module = Segmenter(model, request.logits, request.sizes)
    tf.saved_model.save(module, os.path.join(folder, SAVED_MODEL),
                        signatures={"serving_default": module.serve})
    return (f"{SAVED_MODEL} (signature serving_default: uint8 {INPUT} [1,H,W,3] -> "
            f"{request.outputs()})")


def _tensors(specs):
    """{name: (dtype name, shape)} of a signature's ``TensorSpec`` by name (None: any)."""
    return {name: (spec.dtype.name, tuple(spec.shape.as_list()) if spec.shape.rank is not None
                   else ()) for name, spec in specs.items()}


@runner("saved_model", accepts=lambda path: os.path.isfile(os.path.join(path, "saved_model.pb")))
def open_folder(path):
    """Class ids by the folder's ``serving_default`` signature, at the image's size; a
    SavedModel tfseg did not export (another signature) is refused first
    (``registry.require_exported``)."""
    signatures = tf.saved_model.load(path).signatures
    if "serving_default" not in signatures:
        raise InputError(f"--model_path: {path} is not a model tfseg exported: it has no "
                         f"serving_default signature (it has "
                         f"{', '.join(signatures) or 'none'}) (docs/export.md)")
    served = signatures["serving_default"]
    outputs = served.structured_outputs  # a signature takes and gives tensors by name
    require_exported(path, _tensors(served.structured_input_signature[1]),
                     _tensors(outputs) if isinstance(outputs, dict) else {})
    return lambda image: served(**{INPUT: tf.constant(image)})[CLASSES].numpy()


def _labels_file(path):
    return os.path.join(path, "assets", labels.FILE)


def write_labels(path, text):
    os.makedirs(os.path.dirname(_labels_file(path)), exist_ok=True)
    with open(_labels_file(path), "w") as f:
        f.write(text)


def read_labels(path):
    if not os.path.isfile(_labels_file(path)):
        return None
    with open(_labels_file(path)) as f:
        return f.read()


labelled("saved_model", write=write_labels, read=read_labels)
