"""What a checkpoint holds, keyed by variable path, and the check that it fits a model.

Keys follow ``tf.train.Checkpoint``'s naming of nested dicts: ``weights/<path>``,
``optimizer/momentum/<path>``, ``optimizer/iterations``, ``step``, and the optional
entries (``OPTIONAL``).
"""

import glob
import os
import re

import keras
import tensorflow as tf

from tfseg import keras_graph, memory
from tfseg.config import ARCHITECTURE, Config
from tfseg.config.config import flag_value
from tfseg.errors import InputError
from tfseg.runtime import files

LOSS_SCALE = "loss_scale"
# State a checkpoint may lack, by name prefix: the loss scale (a run switching to
# mixed_float16 starts it afresh), the input position (older checkpoints: the step) and
# the dropout masks' generators (older checkpoints: from their initial state).
OPTIONAL = (f"optimizer/{LOSS_SCALE}/", "batches_read", "rng/")


def rng_state(model):
    """{layer name: seed-generator state} of the model's random layers (dropout). They are
    not among the model's weights, but a resumed run must go on drawing the masks an
    unbroken one would."""
    return {layer.name: layer.seed_generator.state for layer in keras_graph.sublayers(model)
            if getattr(layer, "seed_generator", None) is not None}


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
        state["momentum"] = {v.path: inner.momentums[keras_graph.slot_index(inner, v)]
                             for v in model.trainable_variables}
    if inner is not optimizer:
        state[LOSS_SCALE] = {"dynamic_scale": optimizer.dynamic_scale,
                             "step_counter": optimizer.step_counter}
    return state


# How tf.train.Checkpoint names a variable at a path of dict keys: "." escaped as "..",
# "/" as ".S", then the value's attribute name.
_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def checkpoint_keys(tree, prefix=()):
    """{checkpoint key: (readable name, variable)} of the variables in nested dicts."""
    keys = {}
    for name, value in tree.items():
        if isinstance(value, dict):
            keys.update(checkpoint_keys(value, prefix + (name,)))
        else:
            parts = prefix + (name,)
            escaped = "/".join(p.replace(".", "..").replace("/", ".S") for p in parts)
            keys[escaped + _VALUE_SUFFIX] = ("/".join(parts), value)
    return keys


def _readable(key):
    """"weights/a.Sb..c/.ATTRIBUTES/VARIABLE_VALUE" -> "weights/a/b.c" (undoes the escaping)."""
    escaped = key[:-len(_VALUE_SUFFIX)]
    return re.sub(r"\.(.)", lambda m: "/" if m.group(1) == "S" else m.group(1), escaped)


class DamagedCheckpoint(InputError):
    """A checkpoint's files read, but do not parse (truncated, overwritten)."""

    def __init__(self, path, error):
        super().__init__(f"checkpoint {path} is damaged or unreadable: "
                         f"{str(error).strip().splitlines()[0]}")
        self.path = path


class VanishedCheckpoint(DamagedCheckpoint):
    """A checkpoint that was there when it was found, and is gone (its index file) when
    it is read: a training run's rotation removed it. As a damaged one, training falls
    back to the one before; eval reads the newest (``tfseg.evaluation.loading``)."""

    def __init__(self, path):
        InputError.__init__(self, f"checkpoint {path} was removed while it was read "
                                  f"(no {path}.index now)")
        self.path = path


def damaged(path, error):
    """The error to raise for a checkpoint that TF could not read: ``DamagedCheckpoint``
    when every one of its files reads back whole (so the bytes are bad), else a plain
    one-line ``InputError`` naming the file that the system would not read (EIO, a
    permission, a stale handle, a folder in its place): not a reason to fall back to an
    older checkpoint and, later, overwrite this one. A checkpoint whose index file is
    gone was removed while it was read: ``VanishedCheckpoint``."""
    if not tf.io.gfile.exists(path + ".index"):
        return VanishedCheckpoint(path)
    for name in glob.glob(glob.escape(path) + ".*"):
        try:
            with open(name, "rb") as f:
                while f.read(1 << 24):
                    pass
        except OSError as os_error:
            return InputError(f"checkpoint file {name} cannot be read: "
                              f"{os_error.strerror}")
    return DamagedCheckpoint(path, error)


def stored(path):
    """{key: shape} of the checkpoint ``path``; a damaged one is one line naming it."""
    try:
        return {name: tuple(shape) for name, shape in tf.train.list_variables(path)}
    except (tf.errors.OpError, ValueError) as error:
        raise damaged(path, error) from None


def check_matches(path, model, state=None):
    """Raises a one-line InputError naming ``path`` unless it holds exactly ``model``'s
    weights and, if given, every entry of ``state`` (optimizer, step) but the ``OPTIONAL``.

    ``restore`` must use ``expect_partial`` (eval restores no optimizer), which
    would also hide a checkpoint of another architecture: missing weights would
    keep their random initial values and extra ones would be dropped, silently.
    """
    on_file = stored(path)
    weights = checkpoint_keys({"weights": memory.variables_by_path(model)})
    wanted = dict(weights)
    for key, (name, variable) in checkpoint_keys(state or {}).items():
        if not name.startswith(OPTIONAL):
            wanted[key] = (name, variable)
    stored_weights = [key for key in on_file if key.startswith("weights/")]
    missing = [name for key, (name, _) in wanted.items() if key not in on_file]
    extra = [_readable(key) for key in stored_weights if key not in weights]
    reshaped = [f"{name} {on_file[key]} vs {tuple(v.shape)}" for key, (name, v) in wanted.items()
                if key in on_file and on_file[key] != tuple(v.shape)]
    problems = [f"{len(names)} {what} (e.g. {names[0]})" for names, what in (
        (missing, "entries missing"), (extra, "weights not in the model"),
        (reshaped, "of another shape, checkpoint vs model"),
    ) if names]
    if problems:
        recorded = _recorded_architecture(path)
        settings = (f"It was trained with {recorded}: give those flags; or was it trained"
                    if recorded else "Was it trained with other --dataset, --backbone, "
                    "--width_multiplier, --middle_repeats or --norm,")
        raise InputError(
            f"checkpoint {path} does not match the model {model.name}: "
            f"{'; '.join(problems)}. {settings} with --freeze_batch_norm (no slots for the "
            f"norms), or by a tfseg before 0.2 (optimizer by position)?")


def _recorded_architecture(path):
    """"--dataset=... --backbone=... (FOLDER/config.json)": the ``ARCHITECTURE`` settings
    that the config.json beside checkpoint ``path`` records; "" without a readable one."""
    folder = os.path.dirname(path) or "."
    try:
        settings = Config.settings_of(files.load_config(folder))
    except InputError:  # a damaged record is named where it is read; here it is a hint
        return ""
    shown = [f"--{name}={flag_value(settings[name])}" for name in ARCHITECTURE
             if name in settings]
    return f"{' '.join(shown)} ({os.path.join(folder, files.CONFIG_FILE)})" if shown else ""
