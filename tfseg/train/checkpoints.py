"""Checkpoints keyed by variable path, with ``tf.train.CheckpointManager`` rotation and resume.

Crash safety: ``CheckpointManager.save`` writes the data and index files under
temporary names, renames them into place, and only then rewrites the small
``checkpoint`` state file (itself written to a temp file and renamed). A
``kill -9`` at any point therefore leaves ``latest_checkpoint`` naming a complete
checkpoint: either the new one or the one before (tests/train checks it).
"""

import json
import os
import shutil

import tensorflow as tf

from tfseg import memory

CONFIG_FILE = "config.json"


def is_chief(strategy):
    """True on the one worker that owns ``model_dir`` (always true on one machine)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    return resolver.task_type in ("chief", None) or (
        resolver.task_type == "worker" and resolver.task_id == 0
        and "chief" not in resolver.cluster_spec().as_dict())


def checkpoint_dir(model_dir, strategy):
    """``model_dir`` on the chief; a private scratch folder on other workers.

    MultiWorkerMirroredStrategy needs every worker to take part in a save
    (the variables' values are gathered collectively), but only the chief's
    files are kept.
    """
    if is_chief(strategy):
        return model_dir
    return os.path.join(model_dir, f"worker_tmp_{strategy.cluster_resolver.task_id}")


class Checkpoints:
    """Save/restore of model weights (by path), optimizer and step, in ``model_dir``.

    ``memory.checkpoint`` keys the model's weights by variable path, so stock
    and memory-saving (and recompute) models restore each other's checkpoints.
    """

    def __init__(self, model, model_dir, strategy=None, keep=3, **others):
        strategy = strategy or tf.distribute.get_strategy()
        self.chief = is_chief(strategy)
        self.directory = checkpoint_dir(model_dir, strategy)
        self.checkpoint = memory.checkpoint(model, **others)
        self.manager = tf.train.CheckpointManager(self.checkpoint, self.directory,
                                                  max_to_keep=keep)

    @property
    def latest(self):
        return self.manager.latest_checkpoint

    def restore(self, path=None):
        """Restores ``path`` or the latest checkpoint; returns the path, or None if there is none.

        A model built with unused extras (a fresh optimizer for eval) is fine:
        ``expect_partial`` silences the values it does not ask for.
        """
        path = path or self.latest
        if path is None:
            return None
        if not tf.io.gfile.exists(path + ".index"):
            raise FileNotFoundError(f"--checkpoint: no checkpoint at {path}")
        self.checkpoint.restore(path).expect_partial()
        return path

    def save(self, step):
        path = self.manager.save(checkpoint_number=step)
        if not self.chief:
            # The other workers' copies are only needed to take part in the save.
            shutil.rmtree(self.directory, ignore_errors=True)
        return path


def find_checkpoint(model_dir, name=""):
    """The checkpoint prefix named by ``--checkpoint`` (a path, or a name in ``model_dir``),
    else the latest in ``model_dir``.

    Raises:
      FileNotFoundError: naming the flag and the folder, when there is none.
    """
    if name:
        for candidate in (name, os.path.join(model_dir, name)):
            if tf.io.gfile.exists(candidate + ".index"):
                return candidate
        raise FileNotFoundError(f"--checkpoint: no checkpoint {name!r} (nor in {model_dir})")
    latest = tf.train.latest_checkpoint(model_dir) if os.path.isdir(model_dir) else None
    if latest is None:
        raise FileNotFoundError(f"--model_dir: no checkpoint in {model_dir}; train first")
    return latest


def save_config(config, model_dir):
    """Writes the run's config as JSON next to the checkpoints (atomically)."""
    os.makedirs(model_dir, exist_ok=True)
    path = os.path.join(model_dir, CONFIG_FILE)
    with open(path + ".tmp", "w") as f:
        f.write(config.to_json())
    os.replace(path + ".tmp", path)
    return path


def load_config(model_dir):
    """The saved config dict of a run, or {} if it has none."""
    path = os.path.join(model_dir, CONFIG_FILE)
    if not os.path.isfile(path):
        return {}
    with open(path) as f:
        return json.load(f)
