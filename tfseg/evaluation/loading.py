"""Rebuild a trained model from ``model_dir`` (its saved architecture) and a checkpoint."""

import dataclasses

from tfseg.train import builders, checkpoints

# Settings that change which variables exist; taken from the run's saved config
# so that `--mode=eval` works with the training command's defaults or flagfile.
ARCHITECTURE = ("dataset", "width_multiplier", "middle_repeats", "norm")


def with_saved_architecture(config, log=print):
    """``config`` with ``ARCHITECTURE`` fields replaced by those in ``model_dir/config.json``.

    The output stride is not replaced: evaluating at another stride than the
    training one is legitimate (same weights).
    """
    saved = checkpoints.load_config(config.model_dir)
    changes = {k: saved[k] for k in ARCHITECTURE if k in saved and saved[k] != getattr(config, k)}
    if changes:
        log(f"using the trained model's settings from {config.model_dir}/config.json: {changes}")
        config = dataclasses.replace(config, **changes)
    return config


def load_model(config, stock=False, log=print):
    """(model, source, checkpoint path): the model of ``config``, restored for inference.

    Args:
      stock: build the stock Keras model even if ``config.memory_saving`` /
        ``recompute`` are set (weights are keyed by path, so they load either way);
        used for export, where only portable layers should be saved.
    """
    config = with_saved_architecture(config, log=lambda *a: None)  # idempotent; callers log it
    if stock:
        config = dataclasses.replace(config, memory_saving=False, recompute=())
    path = checkpoints.find_checkpoint(config.model_dir, config.checkpoint)
    builders.set_dtype_policy(config)
    source = builders.source(config, training=False)
    # Inference never needs sync batch norm: it uses the moving statistics.
    norm = "batch" if config.norm == "sync_batch" else config.norm
    model = builders.model(config, source.num_classes, norm)
    checkpoints.Checkpoints(model, config.model_dir).restore(path)
    log(f"restored {path}")
    return model, source, path
