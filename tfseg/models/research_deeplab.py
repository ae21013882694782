"""Import research/deeplab's TF1 checkpoints (xception_65 DeepLabv3+, or its ImageNet backbone).

research/deeplab (tensorflow/models: `core/xception.py`, `model.py`) names variables
by slim scopes, which follow from tfseg's block specs (`XCEPTION65`) by one rule
(`_layers`): xception_65/{flow}/block{b}/unit_{k}/xception_module/separable_conv{i}_X
is tfseg's {unit}_sepconv{i}_X ({flow} a spec's flow, b counting that flow's specs,
{unit} the spec's k-th unit), .../shortcut is {unit}_shortcut and
xception_65/entry_flow/conv1_{i} is entry_conv{i}; the heads' scopes image_pooling,
aspp0, aspp{i}_X, concat_projection, decoder/feature_projection0,
decoder/decoder_conv{j}_X and logits/semantic are aspp_pool_conv, aspp_conv1x1,
aspp_sepconv{i}_X, aspp_projection, decoder_projection, decoder_conv{j + 1}_X and
logits. Leaves: weights and depthwise_weights -> kernel, biases -> bias,
S/BatchNorm/{gamma, beta, moving_mean, moving_variance} -> the norm layer S_bn.
Checked against a checkpoint written by research/deeplab's own graph (xception_65, OS16).
"""

import collections
import dataclasses
import logging
import re

import keras
import numpy as np
import tensorflow as tf

from tfseg import keras_graph, memory
from tfseg.errors import InputError
from tfseg.models import xception
from tfseg.models.deeplab import deeplab_v3_plus

# research/deeplab's ASPP and decoder norm epsilon (model.py's batch-norm params; 1e-3 in
# its Xception) and its resizes (align_corners=True); imported models use them by default.
REFERENCE_CONVENTIONS = {"head_epsilon": 1e-5, "resize": "align_corners"}
SCOPE = "xception_65"
_BN = ("gamma", "beta", "moving_mean", "moving_variance")  # the same leaves in both
_LOGITS = "logits/semantic"
_MIDDLE = re.compile(rf"^{SCOPE}/middle_flow/block1/unit_(\d+)/")
_ATROUS = re.compile(r"^aspp(\d+)_depthwise/")
_logger = logging.getLogger("tfseg.models")


@dataclasses.dataclass(frozen=True)
class ImportReport:
    """What `load_research_deeplab` did; `str()` is one line with the counts.

    Args: checkpoint (the path as given); loaded (checkpoint variables assigned);
    skipped (checkpoint variables left out on purpose: logits for another class
    count, the ImageNet classifier `xception_65/logits`); initialised (model
    weight paths that keep their initial values, e.g. "aspp_projection/kernel");
    ignored (other checkpoint entries: global_step, Momentum slots, moving
    averages); notes (why variables were skipped); parameters (values loaded).
    """

    checkpoint: str
    loaded: tuple
    skipped: tuple
    initialised: tuple
    ignored: tuple
    notes: tuple
    parameters: int

    def __str__(self):
        why = f" ({'; '.join(self.notes)})" if self.notes else ""
        return (f"research/deeplab checkpoint {self.checkpoint}: loaded {len(self.loaded)} "
                f"variables ({self.parameters:,} parameters), skipped {len(self.skipped)}{why}, "
                f"initialised {len(self.initialised)}, ignored {len(self.ignored)} other entries")


def _layers(middle_repeats, atrous_branches, specs=xception.XCEPTION65):
    """[(reference scope, tfseg layer, kernel leaf, part)] of every conv + norm, by the rule."""
    convs = [(f"{SCOPE}/entry_flow/conv1_{i}", f"{xception.STEM}{i}", "weights") for i in (1, 2)]
    blocks = collections.Counter()
    for spec in specs:
        blocks[spec.flow] += 1
        block = f"{SCOPE}/{spec.flow}/block{blocks[spec.flow]}"
        for k, unit in enumerate(xception.unit_names(spec, middle_repeats), 1):
            scope = f"{block}/unit_{k}/xception_module"
            for i in range(1, len(spec.filters) + 1):
                convs += _separable(f"{scope}/separable_conv{i}", f"{unit}_sepconv{i}")
            if spec.shortcut == "conv":
                convs.append((f"{scope}/shortcut", f"{unit}_shortcut", "weights"))
    heads = [("image_pooling", "aspp_pool_conv", "weights"), ("aspp0", "aspp_conv1x1", "weights")]
    for i in range(1, atrous_branches + 1):
        heads += _separable(f"aspp{i}", f"aspp_sepconv{i}")
    heads += [("concat_projection", "aspp_projection", "weights"),
              ("decoder/feature_projection0", "decoder_projection", "weights")]
    for j in range(2):
        heads += _separable(f"decoder/decoder_conv{j}", f"decoder_conv{j + 1}")
    return [(*conv, "backbone") for conv in convs] + [(*conv, "heads") for conv in heads]


def _separable(scope, layer):
    return [(f"{scope}_depthwise", f"{layer}_depthwise", "depthwise_weights"),
            (f"{scope}_pointwise", f"{layer}_pointwise", "weights")]


def reference_names(middle_repeats, atrous_branches=3):
    """[(reference variable, tfseg weight path, part)] of a DeepLabv3+ by the module's
    rule; part is "backbone" (Xception-65), "heads" (ASPP and decoder) or "logits"."""
    names = []
    for scope, layer, kernel, part in _layers(middle_repeats, atrous_branches):
        names.append((f"{scope}/{kernel}", f"{layer}/kernel", part))
        names += [(f"{scope}/BatchNorm/{leaf}", f"{layer}_bn/{leaf}", part) for leaf in _BN]
    return names + [(f"{_LOGITS}/weights", "logits/kernel", "logits"),
                    (f"{_LOGITS}/biases", "logits/bias", "logits")]


def _open(checkpoint):
    """(reader, {name: shape}) of a checkpoint; InputError if it is none of research/deeplab's."""
    try:
        reader = tf.train.load_checkpoint(checkpoint)
    except (tf.errors.OpError, ValueError) as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise InputError(f"{checkpoint}: not a readable TensorFlow checkpoint ({reason})") from None
    shapes = reader.get_variable_to_shape_map()
    stem = reference_names(1)[0][0]
    if stem not in shapes:
        raise InputError(f"{checkpoint}: not a research/deeplab xception_65 checkpoint "
                         f"(no variable {stem})")
    return reader, shapes


def _count(pattern, shapes):
    """The largest number `pattern` finds in the checkpoint's names (0 if none)."""
    return max([int(m.group(1)) for m in map(pattern.match, shapes) if m] or [0])


def _options(checkpoint, shapes):
    # The backbone's last conv: its width over the full model's is the multiplier.
    exit_kernel = [f"{s}/weights" for s, *_, part in _layers(1, 0) if part == "backbone"][-1]
    if exit_kernel not in shapes:
        raise InputError(f"{checkpoint}: no variable {exit_kernel}")
    logits = shapes.get(f"{_LOGITS}/biases")
    return {"num_classes": int(logits[0]) if logits else None,
            "width_multiplier": shapes[exit_kernel][-1] / xception.XCEPTION65[-1].filters[-1],
            "middle_repeats": _count(_MIDDLE, shapes) or 1, **REFERENCE_CONVENTIONS}


def research_deeplab_options(checkpoint):
    """`deeplab_v3_plus` keyword arguments that a research/deeplab checkpoint implies.

    num_classes from `logits/semantic/biases` (None for a backbone-only checkpoint),
    middle_repeats from its middle-flow units, width_multiplier from the width of
    the exit flow's last conv over 2048 (1.0 for research/deeplab's own; pass
    another one where that ratio is not the multiplier), plus `REFERENCE_CONVENTIONS`.
    """
    return _options(checkpoint, _open(checkpoint)[1])


def _matched(checkpoint, model, names, shapes, variables, heads, other_classes):
    """(assign {tfseg path: checkpoint name}, skipped names, initialised paths) of
    `reference_names`' `names`; an InputError for a weight either side lacks or has in
    another shape. `heads`: the checkpoint has them; `other_classes`: its logits are for
    another class count."""
    assign, skipped, initialised = {}, [], []
    for name, path, part in names:
        if part != "backbone" and not heads:
            initialised.append(path)
        elif part == "logits" and other_classes:
            skipped.append(name)
            initialised.append(path)
        elif name not in shapes:
            raise InputError(f"{checkpoint}: no variable {name} (for tfseg's {path})")
        elif path not in variables:
            raise InputError(f"{checkpoint}: variable {name} has no counterpart {path} in "
                             f"model {model.name!r} (another output stride or architecture?)")
        elif tuple(shapes[name]) != tuple(variables[path].shape):
            raise InputError(f"{checkpoint}: variable {name} has shape {tuple(shapes[name])}, "
                             f"tfseg's {path} needs {tuple(variables[path].shape)}")
        else:
            assign[path] = name
    return assign, skipped, initialised


def load_research_deeplab(model, checkpoint):
    """Assigns a research/deeplab checkpoint to a tfseg DeepLabv3+ (stock, memory-saving or
    recompute: weights are matched by path, which the twins share); returns an `ImportReport`.

    A checkpoint without heads (the ImageNet xception_65, with its 1001-way
    `xception_65/logits`) loads the backbone and leaves ASPP, decoder and logits
    initialised; logits for another class count are skipped. Every other weight
    must be in the checkpoint with its shape, and every variable the rule expects
    must be in the model: else an InputError naming the checkpoint and the
    variable (and no weight is changed); unreadable files and group-norm models
    too. Training state (global_step, Momentum slots, moving averages) is ignored:
    the plain variables are used, as research/deeplab's own initialisation does.
    """
    if any(isinstance(layer, keras.layers.GroupNormalization) for layer in keras_graph.sublayers(model)):
        raise _group_norm(checkpoint)
    reader, shapes = _open(checkpoint)
    repeats, branches = _options(checkpoint, shapes)["middle_repeats"], _count(_ATROUS, shapes)
    variables = memory.variables_by_path(model)
    names = reference_names(repeats, branches)
    heads = any(name in shapes for name, _, part in names if part != "backbone")
    if not heads:  # the model's own heads, whatever its output stride, stay initialised
        names = [n for n in reference_names(repeats) if n[2] == "backbone" or n[1] in variables]
    classes = variables["logits/bias"].shape[0] if "logits/bias" in variables else None
    logits = shapes.get(f"{_LOGITS}/biases")
    other_classes = logits is not None and classes != logits[0]
    assign, skipped, initialised = _matched(checkpoint, model, names, shapes, variables, heads,
                                            other_classes)
    notes = []
    if skipped:
        notes.append(f"logits: {logits[0]} classes in the checkpoint, {classes} in the model")
    if not heads:
        classifier = sorted(n for n in shapes if n.startswith(f"{SCOPE}/logits/"))
        skipped += classifier
        notes.append("a backbone-only checkpoint: no ASPP, decoder or logits"
                     + (f"; its classifier {SCOPE}/logits skipped" if classifier else ""))
    left = sorted(set(variables) - set(assign) - set(initialised))
    if left:
        raise InputError(f"{checkpoint}: no variable for tfseg's {left[0]} (and {len(left) - 1} "
                         f"more); the checkpoint has {repeats} middle units and {branches} "
                         f"atrous branches")
    # Only now, so that a refused checkpoint leaves the model as it was.
    for path, name in assign.items():
        variables[path].assign(np.asarray(reader.get_tensor(name), variables[path].dtype))
    return ImportReport(
        checkpoint=str(checkpoint), loaded=tuple(assign.values()), skipped=tuple(skipped),
        initialised=tuple(initialised),
        ignored=tuple(sorted(set(shapes) - set(assign.values()) - set(skipped))),
        notes=tuple(notes), parameters=int(sum(np.prod(shapes[n]) for n in assign.values())))


def _group_norm(checkpoint):
    return InputError(f"{checkpoint}: research/deeplab checkpoints hold batch-norm statistics; "
                      f"a group-norm model cannot take them (use norm='batch')")


def from_research_deeplab(checkpoint, *, num_classes=None, log=None, **model_kwargs):
    """A tfseg DeepLabv3+ with the weights of a research/deeplab xception_65 checkpoint.

    Args:
      checkpoint: a TF1 checkpoint prefix (".../model.ckpt") or its folder (read
        by `tf.train.load_checkpoint`: no TF1 graph, no tf_slim).
      num_classes: None: the checkpoint's (`logits/semantic`). Another count
        builds that many logits, initialised, and skips the checkpoint's. A
        backbone-only (ImageNet) checkpoint needs it.
      log: called once with the `ImportReport` (`log=print` prints one line);
        None logs it on the "tfseg.models" logger.
      **model_kwargs: `deeplab_v3_plus`'s (output_stride, memory_saving,
        recompute, input_shape, dropout, policy, ...). width_multiplier and
        middle_repeats default to the checkpoint's (`research_deeplab_options`),
        head_epsilon and resize to research/deeplab's (`REFERENCE_CONVENTIONS`).
        norm="group" is refused: the checkpoint holds batch-norm statistics.

    Returns the `keras.Model` ([-1, 1] images [N, H, W, 3] in, float32 logits
    [N, H, W, num_classes] out, as `deeplab_v3_plus`'s). Raises an InputError, one
    line naming the checkpoint (and the variable), as `load_research_deeplab`.
    """
    if model_kwargs.get("norm") == "group":
        raise _group_norm(checkpoint)  # before building a model that cannot load it
    if model_kwargs.get("backbone") is not None:
        raise ValueError("from_research_deeplab builds research/deeplab's Xception-65: "
                         "leave backbone None")
    options = research_deeplab_options(checkpoint)
    classes = options.pop("num_classes")
    classes = classes if num_classes is None else num_classes
    if classes is None:
        raise InputError(f"{checkpoint}: a backbone-only checkpoint has no segmentation logits: "
                         f"pass num_classes")
    model = deeplab_v3_plus(classes, **{**options, **model_kwargs})
    report = load_research_deeplab(model, checkpoint)
    (log or (lambda r: _logger.info("%s", r)))(report)
    return model
