"""Rebuild a trained model from a checkpoint and the config.json saved beside it."""

import collections
import dataclasses
import os

import numpy as np
import tensorflow as tf

from tfseg import data as data_lib
from tfseg.config import ARCHITECTURE
from tfseg.config.config import flag_value
from tfseg.errors import InputError, TrainedSettingError
from tfseg.runtime import builders, checkpoints, files, init
from tfseg.runtime.pinned import pinned


# step: the training step saved in the checkpoint (0 for one saved without it).
Loaded = collections.namedtuple("Loaded", "model classes checkpoint config step")


@dataclasses.dataclass(frozen=True)
class Classes:
    """What inference needs to know of the data set: names and display colours."""

    class_names: tuple
    palette: np.ndarray

    @property
    def num_classes(self):
        return len(self.class_names)


def resolve(config, log=print):
    """(config, saved): ``config`` with ``checkpoint`` set to the checkpoint's path and the
    ``ARCHITECTURE`` fields of the config.json beside it that the command leaves at their
    defaults (so that ``--mode=eval`` works with the training command's defaults or
    flagfile); ``saved`` is that file's dict.

    A setting the command gives is never replaced: a ``--dataset`` of as many classes
    as the run's is scored as given (said in a line); any other given setting that
    differs from the recorded one is refused, naming both.

    The config is read beside the checkpoint, not in ``--model_dir``: a
    ``--checkpoint`` from another run was trained with that run's settings. The
    output stride is not replaced: evaluating at another stride than the training
    one is legitimate (same weights).

    Raises:
      TrainedSettingError: a given setting that the checkpoint's model cannot have.
      InputError: a given data set of another class count.
    """
    path = files.find_checkpoint(config.run.model_dir, config.run.checkpoint)
    run_dir = os.path.dirname(path) or "."
    saved = files.load_config(run_dir)
    settings, current, default = config.settings_of(saved), config.flat(), type(config)().flat()
    differing = [k for k in ARCHITECTURE if k in settings and settings[k] != current[k]]
    given = [k for k in differing if current[k] != default[k]]
    record = os.path.join(run_dir, files.CONFIG_FILE)
    for name in given:
        if name != "dataset":
            # Every refused setting, so that one of a recipe's can name all it gave.
            raise TrainedSettingError([(k, flag_value(current[k]), flag_value(settings[k]))
                                       for k in given if k != "dataset"], path, record)
        _require_same_classes(config, saved, settings["dataset"], path, record)
        log(f"reading --dataset={current[name]} as given, not the run's "
            f"{settings[name]} ({record})")
    changes = {k: settings[k] for k in differing if k not in given}
    if changes:
        log(f"using the trained model's settings from {record}: {changes}")
    elif not saved:
        log(f"no {files.CONFIG_FILE} beside {path}: the flags describe the model")
    return config.replace(checkpoint=path, **changes), saved


def _require_same_classes(config, saved, recorded, path, record):
    """``InputError`` unless the given data set has as many classes as the run records:
    the checkpoint's logits are one per recorded class."""
    if not saved.get("class_names"):
        return
    have = len(saved["class_names"])
    given = len(data_lib.class_names(builders.data_config(config, training=False)))
    if given != have:
        raise InputError(f"--dataset={config.data.dataset}: it has {given} classes, and the "
                         f"checkpoint {path} was trained on {recorded}'s {have} ({record}); "
                         f"leave --dataset out to read {recorded}")


def recorded_classes(saved):
    """The ``Classes`` a run's config.json dict records; None for one without them."""
    if saved.get("class_names") and saved.get("palette"):
        return Classes(tuple(saved["class_names"]), np.asarray(saved["palette"], np.uint8))
    return None


# The settings of the run's data set that eval takes from its config.json where the flags
# leave them at their defaults (``files.recorded_data``): the data set it scores.
RECORDED_EVAL = ("dataset", "data_dir", "eval_split")


def recorded_eval_data(config, saved, run_dir):
    """``config`` with the evaluation data set that ``saved``, the config.json of the run
    in ``run_dir``, records, where no flag names another (``files.recorded_data``: a
    relative folder taken from where the run was started), not the folder of
    ``--data_dir``'s default, where the synthetic reader would write a new data set.

    Raises:
      InputError: the recorded data folder is not there (one line naming it, the file
        and --data_dir); nothing is read or written.
    """
    data = files.recorded_data(config, saved, run_dir, RECORDED_EVAL)
    recorded = (config.data.root == type(config)().data.root
                and "data_dir" in config.settings_of(saved))
    if recorded and not os.path.isdir(data.data.root):
        raise InputError(f"--data_dir: the run's data set ({data.data.dataset}) is in "
                         f"{data.data.root}, as {os.path.join(run_dir, files.CONFIG_FILE)} "
                         f"records it, which is not a folder here; give --data_dir: the "
                         f"folder of the run's data set")
    return data


def classes(config, saved, run_dir="."):
    """The trained model's ``Classes``: from its config.json (``saved``, in ``run_dir``),
    else (runs saved before it held them) from the data set it records
    (``recorded_eval_data``), which must then be on disk."""
    recorded = recorded_classes(saved)
    if recorded is not None:
        return recorded
    source = builders.source(recorded_eval_data(config, saved, run_dir), training=False)
    return Classes(tuple(source.class_names), np.asarray(source.palette, np.uint8))


def run_classes(config):
    """The ``Classes`` of the run in ``--model_dir`` (its config.json), else of the data
    set, without loading a model."""
    model_dir = config.run.model_dir
    return classes(config, files.load_config(model_dir), model_dir)


def num_classes(config):
    """The class count of the run in ``config.model_dir`` (its config.json), else of
    the data set's class list (``tfseg.data.class_names``): no images are read."""
    return recorded_num_classes(config, files.load_config(config.run.model_dir))


def recorded_num_classes(config, saved):
    """``num_classes`` of a run whose config.json dict is ``saved`` ({} for none)."""
    data = builders.data_config(config, training=True)
    recorded = saved.get("class_names")
    if recorded and config.settings_of(saved).get("dataset") == data.dataset:
        return len(recorded)
    return len(data_lib.class_names(data))


def load_model(config, stock=False, log=print):
    """``Loaded(model, classes, checkpoint, config)``: the trained model, restored for inference.

    Needs no data set when the run's config.json holds its classes (predict, export).

    Args:
      stock: build the stock Keras model even if ``config.memory_saving`` /
        ``recompute`` are set (weights are keyed by path, so they load either way);
        used for export, where only portable layers should be saved.

    Raises:
      ValueError: the checkpoint's weights are not this model's (names the checkpoint).
    """
    if _initial_weights_only(config):
        return _load_initial(config, stock, log)
    given = config.run.checkpoint
    config, saved = resolve(config, log)
    if stock:
        config = config.replace(memory_saving=False, recompute=())
    builders.set_dtype_policy(config)
    info = classes(config, saved, os.path.dirname(config.run.checkpoint) or ".")
    # Inference never needs sync batch norm: it uses the moving statistics.
    norm = "batch" if config.model.norm == "sync_batch" else config.model.norm
    model = builders.model(config, info.num_classes, norm)
    path, step = _restore(model, config.run.model_dir, config.run.checkpoint, given, log)
    log(f"restored {path}")
    return Loaded(model, info, path, config.replace(checkpoint=path), step)


# How many newer checkpoints to try when rotation removes the one found (a training run
# saving every few seconds with --keep_checkpoints=1 could remove several in a row).
_TRIES = 5


def _restore(model, model_dir, path, given, log):
    """Restores ``path`` into ``model``; returns (the path restored, its step).

    Without ``--checkpoint`` (``given``), ``path`` is the latest of a folder that a
    training run may be rotating. Its files are pinned (``tfseg.runtime.pinned``) before
    they are read, so a rotation cannot remove them half-way; when it removed them
    before, the newest checkpoint then is read instead (a reader never sees a checkpoint
    half written: the state file names one only once it is whole).
    """
    ckpts = checkpoints.Checkpoints(model, model_dir)
    for _ in range(_TRIES):
        try:
            with pinned(path) as prefix:
                try:
                    ckpts.restore(prefix)
                    return path, _step_of(prefix)
                except InputError as error:
                    raise _naming(error, prefix, path) from None
        except checkpoints.DamagedCheckpoint as error:
            newest = None if given else files.latest_checkpoint(model_dir)
            if newest is None or newest == path:  # named, or truly damaged: one line
                if given and isinstance(error, checkpoints.VanishedCheckpoint):
                    raise InputError(f"--checkpoint: {error}") from None
                raise
            log(f"{path} was removed while it was read (a training run rotating its "
                f"checkpoints?): reading the newest, {newest}")
            path = newest
    raise InputError(f"--model_dir: the checkpoints in {model_dir} were removed faster than "
                     f"they could be read ({_TRIES} in a row); evaluate a copy, or "
                     f"raise --keep_checkpoints")


def _naming(error, prefix, path):
    """``error`` with the pinned ``prefix`` in its message (and ``path`` attribute) given
    back as the checkpoint ``path`` the user knows."""
    if prefix != path:
        error.args = tuple(a.replace(prefix, path) if isinstance(a, str) else a
                           for a in error.args)
        if getattr(error, "path", None) == prefix:
            error.path = path
    return error


def _step_of(prefix):
    """The training step saved in the checkpoint ``prefix`` (0 for one saved without it)."""
    reader = tf.train.load_checkpoint(prefix)
    key = "step/.ATTRIBUTES/VARIABLE_VALUE"
    return int(reader.get_tensor(key)) if reader.has_tensor(key) else 0


def _initial_weights_only(config):
    """True for eval/predict/export of ``--init_checkpoint`` itself: no ``--checkpoint``
    and no checkpoint in ``--model_dir`` (a trained run there wins, as in training)."""
    run = config.run
    return bool(run.init_checkpoint and not run.checkpoint
                and files.latest_checkpoint(run.model_dir) is None)


def _load_initial(config, stock, log):
    """``load_model`` of the flags' model with the weights of ``--init_checkpoint``; the
    class names and palette are the data set's (``--dataset``), read without its images."""
    if stock:
        config = config.replace(memory_saving=False, recompute=())
    builders.set_dtype_policy(config)
    data_config = builders.data_config(config, training=False)
    info = Classes(tuple(data_lib.class_names(data_config)),
                   np.asarray(data_lib.palette(data_config), np.uint8))
    norm = "batch" if config.model.norm == "sync_batch" else config.model.norm
    model = builders.model(config, info.num_classes, norm)
    # A result from weights left at their initial values would pass for the model's.
    init.load(model, config.run.init_checkpoint, log, partial=False)
    return Loaded(model, info, config.run.init_checkpoint, config, 0)
