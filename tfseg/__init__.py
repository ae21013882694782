"""tfseg: train DeepLabv3+ / Xception-65 at full resolution on one GPU, with training
memory cut by exact graph-level rewrites.

The names a user needs are here; each loads its part (and TensorFlow) on first use, so
``import tfseg`` is instant and ``tfseg --mode=validate`` runs without TensorFlow. The
parts load the same way, by name: ``tfseg.memory.changes(model)`` after ``import tfseg``.

Example:
    import tfseg
    model = tfseg.deeplab_v3_plus(num_classes=19, width_multiplier=0.25, middle_repeats=2)
    lean = tfseg.rewrite(model)                  # the same maths, less training memory
    plain = tfseg.rewrite(model, tfseg.RewriteOptions(fuse_separable=False))
    tfseg.train(train_steps=20, warmup_steps=5, model_dir="runs/try")  # the synthetic default
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


def _parts():
    """The names of tfseg's subpackages and modules (``memory``, ``models``, ``errors``,
    ...), read from the folder without importing any."""
    import pkgutil

    return {part.name for part in pkgutil.iter_modules(__path__) if not part.name.startswith("_")}


def __getattr__(name):
    # A part is imported by name, as ``import tfseg.memory`` would, so ``tfseg.memory``
    # works after a plain ``import tfseg``.
    if name in _API:
        value = getattr(importlib.import_module(_API[name]), name)
    elif name in _parts():
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module 'tfseg' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_API) | _parts())


def _register_layers(keras):
    """Keras finds tfseg's layers in a saved model by their registered names, which
    exist once ``tfseg.layers`` is imported; it imports TensorFlow, so it waits for
    Keras (now, if Keras is already imported)."""
    importlib.import_module("tfseg.layers")


wrapt.register_post_import_hook(_register_layers, "keras")
