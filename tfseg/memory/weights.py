"""Weights keyed by variable path, so they move between stock and memory-saving models.

Keras' own formats key layers by position (`tf.train.Checkpoint` on a model) or by
class name (`.weights.h5`). The memory-saving model has no ReLU layers where
they are fused, and its layers have other classes. Both keys therefore differ
between the twins, while every variable path ("entry_conv1_bn/gamma") is the same.
"""

import tensorflow as tf


def variables_by_path(model):
    """{variable.path: variable} for every weight of `model`, nested blocks included."""
    variables = {}
    for variable in model.weights:
        if variables.setdefault(variable.path, variable) is not variable:
            raise ValueError(f"{model.name}: two variables share the path {variable.path!r}")
    return variables


def copy_weights(source, target):
    """Assigns every weight of `target` from the `source` weight with the same path."""
    available = variables_by_path(source)
    for path, variable in variables_by_path(target).items():
        if path not in available:
            raise ValueError(f"{source.name} has no weight {path!r} that {target.name} needs")
        if tuple(available[path].shape) != tuple(variable.shape):
            raise ValueError(
                f"weight {path!r}: {source.name} has shape {tuple(available[path].shape)}, "
                f"{target.name} needs {tuple(variable.shape)}"
            )
        variable.assign(available[path])


def checkpoint(model, **others):
    """A `tf.train.Checkpoint` whose model weights are keyed by path.

    A checkpoint written for the stock model restores into the memory-saving one
    (with or without recompute) and back. `others` (optimizer, step, ...) are
    tracked as usual.
    """
    return tf.train.Checkpoint(weights=variables_by_path(model), **others)
