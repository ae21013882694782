"""``--init_checkpoint``: start from the weights of a research/deeplab checkpoint or of
another tfseg run. Weights only: no step, no optimizer state, no input position.

Two steps, because the model must be built to fit the checkpoint before it is loaded:
``adapt`` takes the architecture settings that the checkpoint implies (research/deeplab's
width, middle units and conventions; a tfseg run's from its ``config.json``) for every
setting the user did not give; ``load`` assigns the weights, skipping logits of another
class count, and logs what was loaded, skipped and left initialised.
"""

import os

import numpy as np
import tensorflow as tf

from tfseg import memory
from tfseg.config import ARCHITECTURE
from tfseg.errors import InputError
from tfseg.models import load_research_deeplab, research_deeplab_options
from tfseg.runtime import files
from tfseg.runtime.state import checkpoint_keys, stored

RESEARCH_DEEPLAB, TFSEG = "research/deeplab", "tfseg"
_RESEARCH_MARK = "xception_65/entry_flow/conv1_1/weights"
# What a research/deeplab checkpoint decides about the model (the classes come from the data).
_RESEARCH_SETTINGS = ("width_multiplier", "middle_repeats", "head_epsilon", "resize")


def resolve(path):
    """(checkpoint prefix, kind) of ``--init_checkpoint``: a prefix, or a folder whose state
    file (TF1's or tfseg's) names one."""
    prefix = path
    if tf.io.gfile.isdir(path):
        prefix = files.latest_checkpoint(path)
        if prefix is None:
            raise InputError(f"--init_checkpoint: no checkpoint in the folder {path}")
    if not tf.io.gfile.exists(prefix + ".index"):
        raise InputError(f"--init_checkpoint: no checkpoint at {path} (no {prefix}.index)")
    names = set(stored(prefix))
    if _RESEARCH_MARK in names:
        return prefix, RESEARCH_DEEPLAB
    if any(name.startswith("weights/") for name in names):
        return prefix, TFSEG
    raise InputError(f"--init_checkpoint: {prefix} is neither a research/deeplab xception_65 "
                     f"checkpoint (no {_RESEARCH_MARK}) nor a tfseg one (no weights/...)")


def adapt(config, given=(), log=print):
    """``config`` with ``init_checkpoint`` resolved to a prefix, and the architecture
    settings the checkpoint implies, except those in ``given`` (the flags the user
    set, which win; a mismatch is then one line at ``load``)."""
    prefix, kind = resolve(config.run.init_checkpoint)
    if kind == RESEARCH_DEEPLAB:
        implied = research_deeplab_options(prefix)
        implied = {name: implied[name] for name in _RESEARCH_SETTINGS}
        source = f"research/deeplab checkpoint {prefix}"
    else:
        run_dir = os.path.dirname(prefix) or "."
        saved = config.settings_of(files.load_config(run_dir))
        implied = {name: saved[name] for name in ARCHITECTURE if name in saved}
        implied.pop("dataset", None)  # the classes are this run's; other logits are skipped
        source = f"{run_dir}/{files.CONFIG_FILE}"
    current = config.flat()
    changes = {k: v for k, v in implied.items() if k not in given and current[k] != v}
    if changes:
        log(f"--init_checkpoint: settings from the {source}: {changes}")
    return config.replace(init_checkpoint=prefix, **changes)


def load(model, path, log=print, partial=True):
    """Assigns the weights of the checkpoint ``path`` (``resolve``) to ``model`` by path;
    logs one line of counts. Logits of another class count are skipped (and a
    research/deeplab backbone-only checkpoint leaves the heads initialised); any other
    weight missing or of another shape is an InputError naming it (and nothing is
    assigned).

    ``partial=False`` (predict, eval, export: a result, not a start) refuses any weight
    left at its initial value, in one line naming it and the way on."""
    prefix, kind = resolve(path)
    if kind == RESEARCH_DEEPLAB:
        report = load_research_deeplab(model, prefix)
        if report.initialised and not partial:
            raise _not_loaded(prefix, path, f"{', '.join(report.notes)}: "
                              f"{len(report.initialised)} weights would keep their initial "
                              f"values (e.g. {report.initialised[0]})")
        log(f"initialised from {report}")
        return
    reader = tf.train.load_checkpoint(prefix)
    variables = memory.variables_by_path(model)
    on_file = stored(prefix)
    assign, skipped = {}, []
    for key, (name, variable) in checkpoint_keys({"weights": variables}).items():
        path_ = name[len("weights/"):]
        if key not in on_file:
            raise InputError(f"--init_checkpoint: {prefix} has no weight {path_} (another "
                             f"architecture? --width_multiplier, --middle_repeats, --norm)")
        if on_file[key] != tuple(variable.shape):
            if path_.startswith("logits/"):
                if not partial:
                    raise _not_loaded(prefix, path, (
                        f"its logits are for {on_file[key][-1]} classes, the model's for "
                        f"{variable.shape[-1]}: {path_} would keep its initial values"))
                skipped.append(path_)
                continue
            raise InputError(f"--init_checkpoint: {prefix}'s {path_} has shape {on_file[key]}, "
                             f"the model's {tuple(variable.shape)}")
        assign[key] = variable
    for key, variable in assign.items():
        variable.assign(np.asarray(reader.get_tensor(key), variable.dtype))
    why = f" (logits of another class count: {', '.join(skipped)})" if skipped else ""
    log(f"initialised from tfseg checkpoint {prefix}: loaded {len(assign)} weights, "
        f"skipped {len(skipped)}{why}, initialised {len(skipped)}")


def _not_loaded(prefix, path, what):
    return InputError(f"--init_checkpoint: {prefix}: {what}, and the results would come "
                      f"from them. Give the --dataset it was trained on, or train from it "
                      f"first (--mode=train --init_checkpoint={path}) and use that run")
