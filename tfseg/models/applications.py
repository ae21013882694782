"""keras.applications models as DeepLabv3+ backbones: which layers are the end
points, what input their ImageNet weights expect, and the output stride.

Each backbone takes tfseg's input, as the built-in Xception-65 does: float images
in [-1, 1] (`tfseg.models.normalize` of uint8 pixels, applied by the training
step, evaluation and export alike), and turns them, inside the model, into what
the constructor's ImageNet weights were trained on (its `preprocess_input`):

  "caffe" (ResNet v1, `keras.applications.resnet.preprocess_input`): 0-255 pixels
    in BGR order less the ImageNet mean.
  "tf" (ResNet v2, MobileNetV2): [-1, 1], tfseg's own: nothing to do.
  "raw" (EfficientNet, whose `preprocess_input` does nothing): 0-255 pixels; the
    model's own Rescaling and Normalization layers do the rest.

So one data pipeline serves every backbone, and an exported model takes the same
uint8 images whichever backbone it has. Each backbone is an `Application` entry
(its constructor, end points and preprocessing) in `tfseg.config.registry.APPLICATIONS`.
"""

import collections
import os
import re
import warnings

import keras
import numpy as np

from tfseg.config.names import one_of
# The table is the config's, so that --backbone is checked without TensorFlow against the
# very list built here; tfseg.models re-exports it.
from tfseg.config.registry import APPLICATIONS, Application  # noqa: F401
from tfseg.errors import InputError
from tfseg.models import dilate as dilate_lib
from tfseg.models.backbone import LOW_LEVEL, OUT
from tfseg.models.xception import OUTPUT_STRIDES


def application_backbone(name, *, input_shape=(None, None, 3), output_stride=32, weights=None):
    """A keras.applications model as a DeepLabv3+ backbone (`tfseg.models.backbone`).

    Args:
      name: a key of `APPLICATIONS` ("resnet50", "mobilenetv2", "efficientnetb0", ...).
      input_shape: (H, W, 3); None sizes take any size.
      output_stride: 8, 16 or 32: the stride of "out". Below 32 the stages past it
        are dilated (`tfseg.models.dilate`); the variables are the same.
      weights: None (random), "imagenet" (the constructor's own, which Keras
        downloads and caches on first use) or the path of a `.weights.h5` file:
        `save_weights` of `keras.applications.<constructor>(include_top=False)`,
        loaded by Keras' loader into that model before it is dilated. A missing
        or mismatched file is an InputError naming it. As with the constructor's
        own `weights=PATH`, an EfficientNet built from a file has no extra
        Rescaling that Keras adds for its ImageNet download
        (https://github.com/tensorflow/tensorflow/issues/49930): use "imagenet" for those.

    Returns a functional `keras.Model`: tfseg's [-1, 1] images [N, H, W, 3] in, a
    dict out: "low_level" (stride 4) and "out" (stride `output_stride`). Layers the
    constructor leaves unnamed (EfficientNet's Rescaling and Normalization) are
    named as in a fresh process, so that their variable paths, which checkpoints
    are keyed by, do not depend on what the process built before.
    """
    one_of(name, APPLICATIONS, "backbone")  # an InputError of one line listing them
    if output_stride not in OUTPUT_STRIDES:
        raise ValueError(f"output_stride must be one of {OUTPUT_STRIDES}, got {output_stride}")
    spec = APPLICATIONS[name]
    if weights not in (None, "imagenet") and not os.path.isfile(weights):
        raise InputError(f"backbone weights {weights}: no such file (expected the .weights.h5 "
                         f"of keras.applications.{spec.constructor}(include_top=False), or "
                         f"imagenet)")
    image = keras.Input(input_shape, name="image")
    constructor = getattr(keras.applications, spec.constructor)
    with warnings.catch_warnings():
        # MobileNetV2 warns that a free input size gets the 224x224 ImageNet weights.
        warnings.simplefilter("ignore", UserWarning)
        base = constructor(include_top=False, weights="imagenet" if weights == "imagenet" else None,
                           input_tensor=_imagenet_input(image, spec.preprocessing))
    if weights not in (None, "imagenet"):
        _load(base, weights, spec)
    features = keras.Model(image, {LOW_LEVEL: base.get_layer(spec.low_level).output,
                                   OUT: base.get_layer(spec.out).output}, name=name)
    return dilate_lib.dilate(features, output_stride, names=_fresh_names(features))


def _imagenet_input(image, preprocessing):
    """tfseg's [-1, 1] `image` as the weights expect it (module docstring)."""
    if preprocessing == "tf":
        return image
    if preprocessing == "raw":
        return keras.layers.Rescaling(127.5, offset=127.5, name="image_preprocessing")(image)
    # Keras' "caffe" preprocess_input(p) is BGR(p) - ImageNet mean: at p = 0, minus the mean.
    minus_mean = keras.applications.resnet.preprocess_input(np.zeros((1, 3), "float32"))[0]
    bgr = keras.ops.flip(image, axis=-1)
    return keras.layers.Rescaling(127.5, offset=[127.5 + float(m) for m in minus_mean],
                                  name="image_preprocessing")(bgr)


def _load(model, path, spec):
    """Keras' `load_weights` of `path` into the constructor's `model`; one line on failure."""
    what = f"keras.applications.{spec.constructor}(include_top=False)"
    try:
        with warnings.catch_warnings():
            # Keras 3 warns once for every container the file has no group for.
            warnings.simplefilter("ignore", UserWarning)
            model.load_weights(path)
    except (ValueError, OSError) as error:
        raise InputError(f"backbone weights {path}: not the weights of {what}: "
                         f"{_load_error(error)}") from None


def _load_error(error):
    """Keras' load error in one line. Its message for a file of another model opens with
    "A total of N objects could not be loaded. Example error message for object
    <Conv2D name=conv1_conv, built=True>:" and gives the reason on a later line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    total = re.match(r"A total of (\d+) objects could not be loaded\. Example error message "
                     r"for object <\w+ name=([^,>]+)", lines[0])
    if total and len(lines) > 1:
        return (f"{total.group(1)} layers could not be loaded, the first "
                f"{total.group(2)}: {lines[1]}")
    if lines[0].endswith(":") and len(lines) > 1:  # a message whose reason follows
        return re.sub(r"<\w+ name=([^,>]+)[^>]*>", r"\1", lines[0]) + " " + lines[1]
    return lines[0]


def _snake_case(name):
    """Keras' automatic layer-name prefix for a class name ("ZeroPadding2D" -> "zero_padding2d")."""
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def _fresh_names(model):
    """{layer name: name} for the layers Keras named by its process-wide counter
    ("normalization_3" in a process's fourth EfficientNet): the names a fresh process
    gives them, counted in this model."""
    counts, names = collections.Counter(), {}
    for layer in model.layers:
        prefix = _snake_case(type(layer).__name__)
        if re.fullmatch(rf"{prefix}(_\d+)?", layer.name):
            names[layer.name] = prefix + (f"_{counts[prefix]}" if counts[prefix] else "")
            counts[prefix] += 1
    return names
