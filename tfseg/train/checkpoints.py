"""Checkpoints keyed by variable path, with ``tf.train.CheckpointManager`` rotation and resume.

Crash safety: ``CheckpointManager.save`` writes the data and index files under
temporary names, renames them into place, and only then rewrites the small
``checkpoint`` state file (itself written to a temp file and renamed). A
``kill -9`` at any point therefore leaves ``latest_checkpoint`` naming a complete
checkpoint: either the new one or the one before (tests/train checks it).
"""

import glob
import json
import os
import re
import shutil

import keras
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


LOSS_SCALE = "loss_scale"


def optimizer_state(optimizer, model):
    """The optimizer's state as nested dicts keyed by variable path, for ``tf.train.Checkpoint``.

    Keras tracks an optimizer's slots by position in ``trainable_variables``, and
    the stock and memory-saving models order those differently: positional slots
    would fail to restore across variants, or land on another variable of the
    same shape without a word. Here each momentum slot is keyed by its model
    variable's path, like the weights. The loss-scale state (``mixed_float16``)
    is its own entry, so a run may switch dtype policy: the variables and slots
    are float32 under every policy, and the loss scale starts afresh where the
    checkpoint has none.
    """
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    if not isinstance(inner, keras.optimizers.SGD):
        raise TypeError(f"tfseg checkpoints hold SGD state, not {type(inner).__name__}'s")
    state = {"iterations": inner.iterations}
    if inner.momentums:
        state["momentum"] = {v.path: inner.momentums[inner._get_variable_index(v)]
                             for v in model.trainable_variables}
    if inner is not optimizer:
        state[LOSS_SCALE] = {"dynamic_scale": optimizer.dynamic_scale,
                             "step_counter": optimizer.step_counter}
    return state


# How tf.train.Checkpoint names a variable at a path of dict keys: "." escaped as "..",
# "/" as ".S", then the value's attribute name.
_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def _keys(tree, prefix=()):
    """{checkpoint key: (readable name, variable)} of the variables in nested dicts."""
    keys = {}
    for name, value in tree.items():
        if isinstance(value, dict):
            keys.update(_keys(value, prefix + (name,)))
        else:
            parts = prefix + (name,)
            escaped = "/".join(p.replace(".", "..").replace("/", ".S") for p in parts)
            keys[escaped + _VALUE_SUFFIX] = ("/".join(parts), value)
    return keys


def _readable(key):
    """"weights/a.Sb..c/.ATTRIBUTES/VARIABLE_VALUE" -> "weights/a/b.c" (undoes the escaping)."""
    escaped = key[:-len(_VALUE_SUFFIX)]
    return re.sub(r"\.(.)", lambda m: "/" if m.group(1) == "S" else m.group(1), escaped)


def _stored(path):
    """{key: shape} of the checkpoint ``path``; a damaged one is one line naming it."""
    try:
        return {name: tuple(shape) for name, shape in tf.train.list_variables(path)}
    except (tf.errors.OpError, ValueError) as error:
        raise InputError(f"tfseg: checkpoint {path} is damaged or unreadable: "
                         f"{str(error).strip().splitlines()[0]}") from None


def check_matches(path, model, state=None):
    """Raises a one-line InputError naming ``path`` unless it holds exactly ``model``'s
    weights and, if given, every entry of ``state`` (optimizer, step) but the loss scale.

    ``restore`` must use ``expect_partial`` (eval restores no optimizer), which
    would also hide a checkpoint of another architecture: missing weights would
    keep their random initial values and extra ones would be dropped, silently.
    """
    stored = _stored(path)
    weights = _keys({"weights": memory.variables_by_path(model)})
    wanted = dict(weights)
    for key, (name, variable) in _keys(state or {}).items():
        if not name.startswith(f"optimizer/{LOSS_SCALE}/"):
            wanted[key] = (name, variable)
    stored_weights = [key for key in stored if key.startswith("weights/")]
    missing = [name for key, (name, _) in wanted.items() if key not in stored]
    extra = [_readable(key) for key in stored_weights if key not in weights]
    reshaped = [f"{name} {stored[key]} vs {tuple(v.shape)}" for key, (name, v) in wanted.items()
                if key in stored and stored[key] != tuple(v.shape)]
    problems = [f"{len(names)} {what} (e.g. {names[0]})" for names, what in (
        (missing, "entries missing"), (extra, "weights not in the model"),
        (reshaped, "of another shape, checkpoint vs model"),
    ) if names]
    if problems:
        raise InputError(
            f"tfseg: checkpoint {path} does not match the model {model.name}: "
            f"{'; '.join(problems)}. Was it trained with other --dataset, --width_multiplier, "
            f"--middle_repeats or --norm, or by a tfseg before 0.2 (optimizer by position)?")


class Checkpoints:
    """Save/restore of model weights and optimizer state (both by path) and step, in
    ``model_dir``.

    Weights and momentum slots are keyed by variable path, so stock,
    memory-saving and recompute models resume each other's checkpoints.
    """

    def __init__(self, model, model_dir, strategy=None, keep=3, optimizer=None, **others):
        strategy = strategy or tf.distribute.get_strategy()
        self.model = model
        self.model_dir = model_dir
        self.chief = is_chief(strategy)
        self.directory = checkpoint_dir(model_dir, strategy)
        self.state = dict(others)
        if optimizer is not None:
            self.state["optimizer"] = optimizer_state(optimizer, model)
        self.checkpoint = memory.checkpoint(model, **self.state)
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

        The model's weights, and the optimizer state and step this object saves,
        must all be in the checkpoint (``check_matches``); other entries may be
        left over (eval builds no optimizer).
        """
        path = path or self.latest
        if path is None:
            return None
        if not tf.io.gfile.exists(path + ".index"):
            raise FileNotFoundError(f"--checkpoint: no checkpoint at {path}")
        check_matches(path, self.model, self.state)
        try:
            self.checkpoint.restore(path).expect_partial()
        except tf.errors.OpError as error:
            raise InputError(f"tfseg: checkpoint {path} is damaged or unreadable: "
                             f"{str(error).strip().splitlines()[0]}") from None
        return path

    def save(self, step):
        path = self.manager.save(checkpoint_number=step)
        if not self.chief:
            # The other workers' copies are only needed to take part in the save.
            shutil.rmtree(self.directory, ignore_errors=True)
        return path

    def remove_leftovers(self):
        """Deletes the ``ckpt-N_temp`` folders of saves that a kill interrupted (run it
        while holding the model folder's lock: a live run's save would lose its files)."""
        # "ckpt" is CheckpointManager's default checkpoint_name.
        for leftover in glob.glob(os.path.join(glob.escape(self.directory), "ckpt-*_temp")):
            shutil.rmtree(leftover, ignore_errors=True)


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
