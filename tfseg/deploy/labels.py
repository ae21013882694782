"""What every exported file carries of its classes: the class names, their colours, the
ignore label and the training run it came from, as one small JSON text (``Labels``).

Each format stores the text its own way, in a place its own tools read without tfseg
(docs/export.md): a SavedModel in ``assets/tfseg_labels.json``, a ``.keras`` file as
``tfseg_labels.json`` in its zip, an ``.onnx`` file in ``metadata_props`` and a
``.tflite`` in its model's ``metadata`` (a named buffer), both under ``tfseg_labels``.
The format modules register how (``registry.labelled``); ``write`` and ``read`` here
are the one way to store and read them.

Example::

    labels = tfseg.deploy.read_labels("runs/try/export/model.tflite")  # None: stored none
    labels.class_names, labels.num_classes, labels.run["checkpoint"]
"""

import dataclasses
import json
import os

import numpy as np

from tfseg.data import IGNORE_LABEL
from tfseg.errors import InputError
from tfseg.evaluation.loading import Classes

NAME = "tfseg_labels"  # the key in ONNX's metadata_props and TFLite's metadata
FILE = NAME + ".json"  # the file in a SavedModel's assets and a .keras zip


@dataclasses.dataclass(frozen=True)
class Labels(Classes):
    """A model's ``Classes`` (names, palette), its ignore label, and ``run``: where it was
    trained ({"model_dir", "checkpoint", "step", "dataset"}, the paths absolute)."""

    ignore_label: int = IGNORE_LABEL
    run: dict = dataclasses.field(default_factory=dict)

    def text(self):
        """The JSON text each format stores."""
        return json.dumps({"class_names": list(self.class_names),
                           "palette": np.asarray(self.palette).tolist(),
                           "ignore_label": int(self.ignore_label), "run": self.run},
                          sort_keys=True)


def of_model(loaded):
    """The ``Labels`` of a loaded trained model (``tfseg.evaluation.loading.Loaded``)."""
    return Labels(tuple(loaded.classes.class_names),
                  np.asarray(loaded.classes.palette, np.uint8),
                  run={"model_dir": os.path.abspath(os.path.dirname(loaded.checkpoint) or "."),
                       "checkpoint": os.path.abspath(loaded.checkpoint),
                       "step": int(loaded.step), "dataset": loaded.config.data.dataset})


def parse(text, path):
    """The ``Labels`` of a stored JSON ``text``.

    Raises:
      InputError: one line naming ``path`` and what is wrong.
    """
    def refuse(why):
        return InputError(f"--model_path: {path}: its {NAME} {why}; export it again")

    try:
        found = json.loads(text)
    except ValueError:  # UnicodeDecodeError too
        raise refuse("are not JSON") from None
    if not isinstance(found, dict):
        raise refuse("are not a JSON object")
    names, palette = found.get("class_names"), found.get("palette")
    ignore, run = found.get("ignore_label", IGNORE_LABEL), found.get("run", {})
    if not (isinstance(names, list) and names and all(isinstance(n, str) for n in names)):
        raise refuse(f"have no list of class_names (got {str(names)[:100]})")
    if not (isinstance(palette, list) and len(palette) == len(names) and all(
            isinstance(c, list) and len(c) == 3
            and all(type(v) is int and 0 <= v <= 255 for v in c) for c in palette)):
        raise refuse(f"palette is not one [R, G, B] of 0-255 for each of the "
                     f"{len(names)} class_names")
    if type(ignore) is not int or not isinstance(run, dict):
        raise refuse("ignore_label or run is of the wrong type")
    return Labels(tuple(names), np.asarray(palette, np.uint8), ignore, run)


def write(exporter, folder, labels):
    """Stores ``labels`` in what ``exporter`` wrote into ``folder`` (its first entry)."""
    exporter.write_labels(os.path.join(folder, exporter.entries[0]), labels.text())


def read_file(exporter, path):
    """The ``Labels`` of the file or folder ``path`` of ``exporter``'s format; None for one
    exported before tfseg stored them.

    Raises:
      InputError: the stored labels, or the file around them, cannot be read (one line).
    """
    try:
        text = exporter.read_labels(path)
    except (OSError, ValueError, IndexError, KeyError, ImportError) as error:  # a reader's
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise InputError(f"--model_path: {path}: its {NAME} could not be read as "
                         f"{exporter.name}: {first[:200]}") from None
    return None if text is None else parse(text, path)
