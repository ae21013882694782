"""Checkpoints keyed by variable path, with ``tf.train.CheckpointManager`` rotation and resume.

Crash safety: ``CheckpointManager.save`` writes the data and index files under
temporary names, renames them into place, and only then rewrites the small
``checkpoint`` state file (itself written to a temp file and renamed). A
``kill -9`` at any point therefore leaves ``latest_checkpoint`` naming a complete
checkpoint: either the new one or the one before (tests/train checks it).
"""

import json
import os
import re
import shutil

import tensorflow as tf

from tfseg import memory
from tfseg.errors import InputError

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
    """Where ``save`` writes: ``model_dir`` on the chief; a scratch folder on other workers.

    MultiWorkerMirroredStrategy needs every worker to take part in a save
    (the variables' values are gathered collectively), but only the chief's
    files are kept. Every worker restores from ``model_dir`` (``Checkpoints.latest``).
    """
    if is_chief(strategy):
        return model_dir
    return os.path.join(model_dir, f"worker_tmp_{strategy.cluster_resolver.task_id}")


# How tf.train.Checkpoint names the entries of the ``weights`` dict (the object
# graph escapes "." as ".." and "/" as ".S" in a dict key).
_WEIGHTS_PREFIX, _VALUE_SUFFIX = "weights/", "/.ATTRIBUTES/VARIABLE_VALUE"


def _key(path):
    return _WEIGHTS_PREFIX + path.replace(".", "..").replace("/", ".S") + _VALUE_SUFFIX


def _path(key):
    escaped = key[len(_WEIGHTS_PREFIX):-len(_VALUE_SUFFIX)]
    return re.sub(r"\.(.)", lambda m: "/" if m.group(1) == "S" else m.group(1), escaped)


def check_matches(path, model):
    """Raises a one-line ValueError naming ``path`` unless its weights are exactly ``model``'s.

    ``restore`` must use ``expect_partial`` (eval restores no optimizer), which
    would also hide a checkpoint of another architecture: missing weights would
    keep their random initial values and extra ones would be dropped, silently.
    """
    stored = {name: tuple(shape) for name, shape in tf.train.list_variables(path)
              if name.startswith(_WEIGHTS_PREFIX) and name.endswith(_VALUE_SUFFIX)}
    wanted = {_key(p): (p, tuple(v.shape)) for p, v in memory.variables_by_path(model).items()}
    missing = [p for key, (p, _) in wanted.items() if key not in stored]
    extra = [_path(key) for key in stored if key not in wanted]
    reshaped = [f"{p} {stored[key]} vs {shape}" for key, (p, shape) in wanted.items()
                if key in stored and stored[key] != shape]
    problems = [f"{len(names)} {what} (e.g. {names[0]})" for names, what in (
        (missing, "model weights missing"), (extra, "weights not in the model"),
        (reshaped, "of another shape, checkpoint vs model"),
    ) if names]
    if problems:
        raise InputError(
            f"tfseg: checkpoint {path} does not match the model {model.name}: "
            f"{'; '.join(problems)}. Was it trained with other --dataset, --width_multiplier, "
            f"--middle_repeats or --norm?")


class Checkpoints:
    """Save/restore of model weights (by path), optimizer and step, in ``model_dir``.

    ``memory.checkpoint`` keys the model's weights by variable path, so stock
    and memory-saving (and recompute) models restore each other's checkpoints.
    """

    def __init__(self, model, model_dir, strategy=None, keep=3, **others):
        strategy = strategy or tf.distribute.get_strategy()
        self.model = model
        self.model_dir = model_dir
        self.chief = is_chief(strategy)
        self.directory = checkpoint_dir(model_dir, strategy)
        self.checkpoint = memory.checkpoint(model, **others)
        self.manager = tf.train.CheckpointManager(self.checkpoint, self.directory,
                                                  max_to_keep=keep)

    @property
    def latest(self):
        """The chief's latest checkpoint in ``model_dir``, on every worker.

        Not ``manager.latest_checkpoint``: on other workers that names a file in
        their scratch folder, which is deleted after each save.
        """
        return latest_checkpoint(self.model_dir)

    def restore(self, path=None):
        """Restores ``path`` or the latest checkpoint; returns the path, or None if there is none.

        The model's weights must match the checkpoint's exactly (``check_matches``);
        other entries may be left over (a fresh optimizer for eval has no slots to fill).
        """
        path = path or self.latest
        if path is None:
            return None
        if not tf.io.gfile.exists(path + ".index"):
            raise FileNotFoundError(f"--checkpoint: no checkpoint at {path}")
        check_matches(path, self.model)
        self.checkpoint.restore(path).expect_partial()
        return path

    def save(self, step):
        path = self.manager.save(checkpoint_number=step)
        if not self.chief:
            # The other workers' copies are only needed to take part in the save.
            shutil.rmtree(self.directory, ignore_errors=True)
        return path


def latest_checkpoint(model_dir):
    """The latest checkpoint in ``model_dir``, or None (also when there is no such folder)."""
    return tf.train.latest_checkpoint(model_dir) if tf.io.gfile.isdir(model_dir) else None


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
    latest = latest_checkpoint(model_dir)
    if latest is None:
        raise FileNotFoundError(f"--model_dir: no checkpoint in {model_dir}; train first")
    return latest


def save_config(config, model_dir, **extra):
    """Writes the run's config, plus ``extra`` entries, as JSON next to the checkpoints.

    ``extra`` holds what predict and export need from the data set (class names,
    palette), so that they run without it. Written atomically: a reader never sees
    half a file.
    """
    os.makedirs(model_dir, exist_ok=True)
    path = os.path.join(model_dir, CONFIG_FILE)
    with open(path + ".tmp", "w") as f:
        json.dump({**json.loads(config.to_json()), **extra}, f, indent=2, sort_keys=True)
    os.replace(path + ".tmp", path)
    return path


def load_config(model_dir):
    """The saved config dict of a run (RunConfig fields and extras), or {} if it has none."""
    path = os.path.join(model_dir, CONFIG_FILE)
    if not os.path.isfile(path):
        return {}
    with open(path) as f:
        try:
            return json.load(f)
        except ValueError as error:
            raise InputError(f"tfseg: {path} is not valid JSON: {error}") from None
