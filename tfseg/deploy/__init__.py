"""Exporting a trained model: SavedModel, .keras, TFLite (LiteRT) and ONNX, each a module
that registers itself (``tfseg.deploy.registry``); ``export`` runs them.

Example::

    from tfseg.deploy import export
    export(Config.from_flat(model_dir="runs/try", export_format=("tflite",)))
"""

# Each format registers itself on import.
from tfseg.deploy import keras_file, onnx, saved_model, tflite  # noqa: F401
from tfseg.deploy.labels import Labels
from tfseg.deploy.registry import (EXPORTERS, EXTRA, Exporter, open_model, read_labels,
                                   register, runner)
from tfseg.deploy.run import calibration_images, export, request_of
from tfseg.deploy.serving import Request, frozen_function, serving_function

__all__ = ["EXPORTERS", "EXTRA", "Exporter", "Labels", "Request", "calibration_images",
           "export", "frozen_function", "open_model", "read_labels", "register", "request_of",
           "runner", "serving_function"]
