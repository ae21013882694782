"""A model folder's files: its checkpoints on disk, the state file naming the latest, and
the run's config.json."""

import json
import os
import re

import tensorflow as tf

from tfseg.config import Config
from tfseg.config.names import RECORDS  # noqa: F401 (read as files.RECORDS)
from tfseg.io.outputs import replaced_file
from tfseg.errors import InputError

CONFIG_FILE = "config.json"
# The settings of a run's data set that ``recorded_data`` takes from its config.json by
# default: its training images (int8 calibration reads them).
RECORDED_DATA = ("dataset", "data_dir", "train_split")


_NUMBERED = re.compile(r"^ckpt-(\d+)\.index$")  # CheckpointManager's default name


def step_of(path):
    """N of a ``.../ckpt-N`` prefix; for a checkpoint named otherwise (not written by
    tfseg, but named by the state file), larger than any N: it counts as the newest."""
    match = _NUMBERED.match(os.path.basename(path) + ".index")
    return int(match.group(1)) if match else float("inf")


def on_disk(model_dir):
    """The ``ckpt-N`` prefixes whose index file is in ``model_dir``, newest first."""
    names = os.listdir(model_dir) if os.path.isdir(model_dir) else []
    prefixes = [os.path.join(model_dir, name[:-len(".index")]) for name in names
                if _NUMBERED.match(name)]
    return sorted(prefixes, key=step_of, reverse=True)


def write_state(directory, latest, older):
    """A state file naming ``latest`` and ``older``, all to be rotated: ``CheckpointManager``
    rotates only the checkpoints with a timestamp after the "last preserved" one, and
    keeps any others forever."""
    paths = [*sorted(older, key=step_of), latest]
    times = [os.path.getmtime(path + ".index") for path in paths]
    tf.compat.v1.train.update_checkpoint_state(
        directory, latest, all_model_checkpoint_paths=paths,
        all_model_checkpoint_timestamps=times, last_preserved_timestamp=min(times) - 1)


def named_checkpoint(model_dir):
    """The checkpoint that ``model_dir``'s ``checkpoint`` state file names, or None (no
    folder, no file, an unreadable file, or one naming a removed checkpoint)."""
    if not tf.io.gfile.isdir(model_dir):
        return None
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")  # an unreadable state file is handled by the callers: no warnings
    try:
        return tf.train.latest_checkpoint(model_dir)
    except ValueError:  # a state file naming no checkpoint (e.g. an empty one)
        return None
    finally:
        logger.setLevel(level)


def listed_checkpoints(model_dir):
    """Every checkpoint the state file of ``model_dir`` lists (the latest last); [] when
    it is missing or unreadable."""
    try:
        state = tf.train.get_checkpoint_state(model_dir)
    except (tf.errors.OpError, ValueError):  # garbage is handled by the callers
        return []
    return list(state.all_model_checkpoint_paths) if state else []


def latest_checkpoint(model_dir):
    """``named_checkpoint``, else the newest ``ckpt-N`` on disk; None when there is none."""
    found = on_disk(model_dir)
    return named_checkpoint(model_dir) or (found[0] if found else None)


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
    palette), so that they run without it. Written whole (``replaced_file``): a reader
    never sees half a file.
    """
    path = os.path.join(model_dir, CONFIG_FILE)
    text = json.dumps({**json.loads(config.to_json()), **extra}, indent=2, sort_keys=True)
    try:
        if os.path.isfile(path):
            with open(path, errors="replace") as f:
                if f.read() == text:
                    return path  # the same record: left as it was
        with replaced_file(path) as new, open(new, "w") as f:
            f.write(text)
    except OSError as error:  # a write error names no file: name it
        raise InputError(f"--model_dir: could not write {path}: {error.strerror}") from None
    return path


def load_config(model_dir):
    """The saved config dict of a run (``Config.to_dict()`` and the ``RECORDS``), or {} if
    it has none; ``Config.settings_of`` reads its settings.

    Raises:
      InputError: one line naming the file, and the field where one is at fault: not
        JSON, a field of the wrong type or value, or one this tfseg does not know
        (``Config.check_saved``). A run's record is never read in part.
    """
    path = os.path.join(model_dir, CONFIG_FILE)
    if not os.path.lexists(path):
        return {}
    try:
        with open(path) as f:
            saved = json.load(f)
    except ValueError as error:  # UnicodeDecodeError too
        raise InputError(f"{path} is not valid JSON: {error}; fix it, or move it away "
                         f"(the flags then describe the run)") from None
    except OSError as error:
        raise InputError(f"{path} cannot be read: {error.strerror}") from None
    Config.check_saved(saved, path, extras=RECORDS)
    _check_records(saved, path)
    return saved


def _check_records(saved, path):
    """One line naming ``path`` and the entry, unless config.json's ``RECORDS`` are what
    training writes."""
    names, palette = saved.get("class_names", []), saved.get("palette", [])
    if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        raise InputError(f"{path}: class_names: must be a list of names, got {names!r}")

    def colour(c):
        return isinstance(c, list) and len(c) == 3 and all(
            type(v) is int and 0 <= v <= 255 for v in c)

    if not (isinstance(palette, list) and all(map(colour, palette))):
        raise InputError(f"{path}: palette: must be a list of [R, G, B] of 0-255, got "
                         f"{str(palette)[:200]}")
    if "palette" in saved and len(palette) != len(names):
        raise InputError(f"{path}: palette: {len(palette)} colours for the {len(names)} "
                         f"class_names")
    for record in ("memory_plan", "device"):
        if not isinstance(saved.get(record, {}), dict):
            raise InputError(f"{path}: {record}: must be an object, got {saved[record]!r}")


def recorded_data(config, saved, run_dir=None, names=RECORDED_DATA):
    """``config`` with the data set ``saved`` (the run's config.json dict) records, for each
    of ``names`` the command leaves at its default: the images the run read, not
    ``--data_dir``'s default folder (where the synthetic reader would write a new data
    set). A relative data folder is taken from the folder the run was trained in, where
    ``run_dir`` (the run's folder now) ends with the ``model_dir`` it records
    (``runs/synthetic`` and ``data/synthetic`` of a run started in /home/me: the data in
    /home/me/data/synthetic, whatever the current folder). Export (int8 calibration, the
    default export size) and eval read the run's data set through it."""
    if not saved:
        return config
    settings, current, default = config.settings_of(saved), config.flat(), type(config)().flat()
    changes = {name: settings[name] for name in names
               if name in settings and current[name] == default[name]}
    root, trained_in = changes.get("data_dir"), _trained_in(settings.get("model_dir"), run_dir)
    if root and not os.path.isabs(root) and trained_in:
        changes["data_dir"] = os.path.join(trained_in, root)
    return config.replace(**changes)


def _trained_in(model_dir, run_dir):
    """The folder a run was started in: ``run_dir`` less the relative ``model_dir`` the run
    records, where it ends with it; else None."""
    if not model_dir or os.path.isabs(model_dir) or not run_dir:
        return None
    here, recorded = os.path.abspath(run_dir), os.path.normpath(model_dir)
    if here.endswith(os.sep + recorded):
        return here[:-len(os.sep + recorded)] or os.sep
    return None
