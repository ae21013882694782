"""``--mode=predict --model_path``: the classes an exported model runs with, checked against
a ``--model_dir`` given, and where its predictions go without ``--output_dir``.

Predictions never go into the folder that holds the model: that is an export folder,
which ``--mode=export --overwrite`` replaces as a whole. ``--model_path=DIR/NAME`` writes
to ``DIR_predictions/NAME``, beside it (``runs/try/export/model.tflite``:
``runs/try/export_predictions/model.tflite``).

Example::

    classes = exported_classes(config, tfseg.deploy.read_labels(path), model_dir_given=True)
"""

import os

import numpy as np

from tfseg import data as data_lib
from tfseg.config import Config
from tfseg.errors import InputError
from tfseg.evaluation.loading import Classes, recorded_classes
from tfseg.runtime import builders, files

# DIR + this: the folder beside DIR that takes the predictions of the models in DIR.
PREDICTIONS = "_predictions"


def default_output(model_path):
    """``DIR_predictions/NAME`` for ``model_path`` = DIR/NAME (DIR made absolute where it
    is the current folder: nothing is written into it)."""
    path = os.path.normpath(model_path)
    folder = os.path.dirname(path) or os.path.abspath(".")
    return os.path.join(folder + PREDICTIONS, os.path.basename(path))


def run_classes(saved):
    """(``Classes``, whose) of the run whose config.json dict is ``saved``: those it
    records, else those of the data set it records (its class list: no image is read, no
    data set made), ``whose`` naming which; (None, why) where there are none to read."""
    if not saved:
        return None, f"has no {files.CONFIG_FILE}"
    recorded = recorded_classes(saved)
    if recorded is not None:
        return recorded, "has"
    config = Config.from_dict(saved)
    data = builders.data_config(config, training=False)
    try:
        names, palette = data_lib.class_names(data), data_lib.palette(data)
    except (InputError, OSError, ValueError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        return None, (f"records no classes, and those of its data set "
                      f"({config.data.dataset} in {data.root}) could not be read: {first}")
    return (Classes(tuple(names), np.asarray(palette, np.uint8)),
            f"records no classes; its data set ({config.data.dataset}) has")


def named(classes):
    """"3 classes (sky, road, car, ...)", "1 class (sky)"."""
    names = ", ".join(classes.class_names[:3]) + (", ..." if classes.num_classes > 3 else "")
    return f"{classes.num_classes} class{'es' if classes.num_classes != 1 else ''} ({names})"


def beyond(config, found, classes, own):
    """The one-line InputError of an exported model that gives class ``found``, beyond its
    ``classes``: the file's own (``own``), which are then damaged or not the file's (the
    run it came from cannot stand in for them: a --model_dir of other classes is
    refused), else those of --model_dir."""
    path = config.run.model_path
    if own:
        return InputError(f"--model_path: {path} gives class {found}, beyond the "
                          f"{named(classes)} its tfseg_labels list: its stored classes do "
                          f"not fit its outputs (damaged, or not this model's); export it "
                          f"again")
    return InputError(f"--model_path: {path} gives class {found}, beyond the {named(classes)} "
                      f"of --model_dir {config.run.model_dir}; give the run it was exported "
                      f"from as --model_dir, or export it again")


def exported_classes(config, own, model_dir_given=None, log=print, note=None):
    """The classes of the exported model ``--model_path``: ``own``, those its file carries
    (``tfseg.deploy.labels.Labels``, None for a file exported before they were stored),
    checked against the run in ``--model_dir`` when one was given (``model_dir_given``;
    None: when it is not the default): the classes its config.json records, else those
    of the data set it records. ``note``, the runner's word on how it runs the file,
    ends the line that names it. A file without its own takes the run's. Where the run
    has neither, the check is skipped in one line saying so.

    Raises:
      InputError: a given --model_dir is not a folder, the run's classes are not the
        file's (one line naming both counts), or neither the file nor a given run has any.
    """
    run = config.run
    if model_dir_given is None:
        model_dir_given = run.model_dir != type(run)().model_dir
    if model_dir_given and not os.path.isdir(run.model_dir):
        raise InputError(f"--model_dir: {run.model_dir} is not a folder; give the run "
                         f"--model_path was exported from, or no --model_dir (files tfseg "
                         f"exports carry their classes)")
    theirs, whose = (run_classes(files.load_config(run.model_dir)) if model_dir_given
                     else (None, None))
    if own is not None:
        if theirs is not None and tuple(own.class_names) != tuple(theirs.class_names):
            origin = getattr(own, "run", {}).get("model_dir")
            way = ("give the run it was exported from, or no --model_dir: the file carries "
                   "its classes")
            if origin and os.path.abspath(run.model_dir) == origin:  # the one it names
                way = ("the file names this run as the one it was exported from: its "
                       "stored classes or the run's config.json changed since; export it "
                       "again")
            raise InputError(f"--model_dir: {run.model_dir} {whose} {named(theirs)} and "
                             f"--model_path {run.model_path} {named(own)}; {way}")
        if model_dir_given and theirs is None:
            log(f"the classes of --model_path were not checked against --model_dir: "
                f"{run.model_dir} {whose}")
        origin = getattr(own, "run", {}).get("checkpoint")
        log(f"running {run.model_path} with its own {named(own)}"
            + (f", exported from {origin}" if origin else "") + _noted(note))
        return own
    if theirs is None:
        raise InputError(f"--model_path: {run.model_path} carries no classes (exported before "
                         f"tfseg stored them) and "
                         + (f"--model_dir {run.model_dir} {whose}" if model_dir_given
                            else "no --model_dir was given")
                         + "; give the run it was exported from as --model_dir, or export "
                           "it again")
    log(f"running {run.model_path}, which carries no classes (exported before tfseg stored "
        f"them), with the {theirs.num_classes} of {run.model_dir}" + _noted(note))
    return theirs


def _noted(note):
    return f"; {note}" if note else ""
