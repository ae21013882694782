"""tfseg: train DeepLabv3+ / Xception-65 at full resolution on one GPU, with training
memory cut by exact graph-level rewrites.

The names a user needs are here; each loads its part (and TensorFlow) on first use, so
``import tfseg`` is instant and ``tfseg --mode=validate`` runs without TensorFlow.

Example:
    import tfseg
    model = tfseg.deeplab_v3_plus(num_classes=19, width_multiplier=0.25, middle_repeats=2)
    lean = tfseg.rewrite(model)                  # the same maths, less training memory
    plain = tfseg.rewrite(model, tfseg.RewriteOptions(fuse_separable=False))
    tfseg.train(train_steps=20, model_dir="runs/try")
    tfseg.evaluate(model_dir="runs/try")["miou"]

A ``model.keras`` that tfseg wrote loads after ``import tfseg``: its layers are
registered with Keras as soon as Keras is imported.
"""

import importlib

import wrapt

__version__ = "0.1.0"

# name -> the module that defines it (loaded on first use).
_API = {
    "Config": "tfseg.config",
    "deeplab_v3_plus": "tfseg.models",
    "from_research_deeplab": "tfseg.models",
    "rewrite": "tfseg.memory",
    "RewriteOptions": "tfseg.memory",
    "paying": "tfseg.memory",
    "train": "tfseg.api",
    "evaluate": "tfseg.api",
    "predict": "tfseg.api",
    "export": "tfseg.api",
}
__all__ = ["__version__", *_API]


def __getattr__(name):
    if name not in _API:
        raise AttributeError(f"module 'tfseg' has no attribute {name!r}")
    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_API))


def _register_layers(keras):
    """Keras finds tfseg's layers in a saved model by their registered names, which
    exist once ``tfseg.layers`` is imported; it imports TensorFlow, so it waits for
    Keras (now, if Keras is already imported)."""
    importlib.import_module("tfseg.layers")


wrapt.register_post_import_hook(_register_layers, "keras")
