"""The names both sides check (data sets, norms, blocks, ...) and the helpers that make
a config field a flag. No TensorFlow."""

import dataclasses
import difflib
import os

from tfseg.config.registry import APPLICATIONS, BUILTIN_BACKBONE, DATASETS  # noqa: F401
from tfseg.errors import InputError

# What a run's config.json holds besides the settings: the class names and palette (predict
# and export need no data set), the memory plan chosen for --memory_budget_gb and the
# device trained on with its overhead (``tfseg.runtime.device.Overhead.to_dict``).
RECORDS = ("class_names", "palette", "memory_plan", "device")
MODES = ("train_and_eval", "train", "eval", "predict", "export", "report", "convert",
         "validate", "recipes")
NORMS = ("batch", "sync_batch", "group")
# The settings (flag names) that decide which variables a model has, or (head_epsilon,
# resize) what the same variables compute: a checkpoint's config.json gives them.
ARCHITECTURE = ("dataset", "backbone", "width_multiplier", "middle_repeats", "norm",
                "head_epsilon", "resize")
# Those that decide which variables a model has: a resume that changes one is refused,
# naming the value config.json records (batch and sync_batch norm have the same ones).
# The data set may change (a converted copy has the same classes); a checkpoint's
# logits of another class count are then refused, naming the recorded data set.
FIXED_ON_RESUME = ("backbone", "width_multiplier", "middle_repeats", "norm")
SAME_VARIABLES = ({"batch", "sync_batch"},)
# --dataset (DATASETS) and --backbone: listed once, in tfseg.config.registry.
APPLICATION_BACKBONES = tuple(APPLICATIONS)
BACKBONES = (BUILTIN_BACKBONE,) + APPLICATION_BACKBONES
# Bilinear resize conventions: tf.image.resize's, and TF1's (research/deeplab's).
RESIZE_MODES = ("half_pixel", "align_corners")
# --jit_compile: none, the whole step, each block (tfseg.xla), or blocks on a GPU only.
JIT_MODES = ("off", "step", "blocks", "auto")
# What --recompute can name: whole backbone blocks (every unit of "middle"), single
# middle units (``unit_name("middle", k)``) and the two head segments.
RECOMPUTE_BLOCKS = ("entry_stem", "entry_block1", "entry_block3", "middle", "exit_block1",
                    "exit_block2")
RECOMPUTE_HEAD = ("aspp", "decoder")
# What a Keras user would use instead of the twins (tfseg.profile.anchors), which the
# report and the benchmark can measure beside tfseg's own variants.
MEMORY_ANCHORS = ("keras_remat_full", "keras_remat_activations", "keras_remat_larger_than",
                  "keras_remat_list_of_layers", "tf_recompute_grad")
REPORT_VARIANTS = ("stock", "memory_saving", "recompute") + MEMORY_ANCHORS
STRATEGIES = ("default", "one_device", "mirrored", "multi_worker")
DTYPE_POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
EVAL_MODES = ("whole", "sliding", "multiscale")
WEIGHT_DECAY_TYPES = ("l2", "decoupled")
# What --mode=predict writes per image: palette colours and an overlay, train ids, or
# Cityscapes label ids (for its benchmark server).
OUTPUT_FORMATS = ("colour", "train_ids", "label_ids")
# What --mode=export can write (each a module of tfseg.deploy registered under its name;
# tests/deploy/test_registry.py checks the two lists agree) and how a .tflite is quantised.
EXPORT_FORMATS = ("saved_model", "keras", "tflite", "onnx")
TFLITE_QUANTIZATIONS = ("none", "float16", "dynamic_int8", "int8")


def unit_name(block, k):
    """The name of unit `k` (from 1) of a repeated backbone block: "middle_unit3"."""
    return f"{block}_unit{k}"


def recompute_names(middle_repeats):
    """Everything --recompute accepts for a backbone with `middle_repeats` middle units."""
    units = tuple(unit_name("middle", k) for k in range(1, middle_repeats + 1))
    return RECOMPUTE_BLOCKS + units + RECOMPUTE_HEAD


def setting(default, help, flag=None, items=None, path=False, aliases=None):
    """A config field that is also a flag. ``items``: (type, count or None) of a list
    flag's values; a single value is repeated to ``count``. ``path``: a str setting that
    also takes an ``os.PathLike``. ``aliases``: {true or false: value} of a str setting
    that was once a bool, so that its old forms (``--name``, ``--noname``, a config.json's
    true) keep their meaning. ``tfseg.config.values`` parses each kind."""
    return dataclasses.field(default=default, metadata=dict(help=help, flag=flag, items=items,
                                                            path=path, aliases=aliases))


def check(ok, flag, message):
    if not ok:
        raise InputError(f"--{flag}: {message}")


def flag_of(field):
    """The flag of a config field (``dataclasses.Field``)."""
    return field.metadata["flag"] or field.name


def device_key(name):
    """One spelling of a device name: "/gpu:1", "GPU:1" and "/device:GPU:1" -> "GPU:1"."""
    return name.rsplit("device:", 1)[-1].strip("/").upper()


def distinct_devices(devices, flag):
    """Refuse a device list that names a device twice, however spelled."""
    keys = [device_key(d) for d in devices]
    twice = [d for d, key in zip(devices, keys) if keys.count(key) > 1]
    check(not twice, flag, f"names a device twice ({twice[0] if twice else ''})")


def folder_ok(path, flag):
    """Refuse a folder flag that names an existing file (a missing folder is made, or
    named, where it is needed)."""
    check(not (path and os.path.exists(path) and not os.path.isdir(path)), flag,
          f"{path} is a file, not a folder")


def crop_ok(size, output_stride):
    """The crop rule: each side is a multiple of the output stride, or one more.

    "multiple + 1" (513, 769) is research/deeplab's corner-aligned convention,
    "multiple" (1024x2048) is Cityscapes' full size. Other sizes work but leave
    a ragged feature-map edge, which costs accuracy for nothing.
    """
    return size >= output_stride and size % output_stride in (0, 1)


def one_of(value, names, flag):
    """Refuse ``value`` unless it is in ``names``, in one line that lists them all and
    suggests the closest (``one_of("resnet5", BACKBONES, "backbone")``: "--backbone: must
    be one of xception65, resnet50, ..., got 'resnet5' (did you mean resnet50?)")."""
    close = difflib.get_close_matches(str(value), list(names), n=1)
    check(value in names, flag, f"must be one of {', '.join(names)}, got {value!r}"
          + (f" (did you mean {close[0]}?)" if close else ""))
