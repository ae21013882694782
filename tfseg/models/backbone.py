"""The backbone contract of DeepLabv3+: a functional Keras model with named features.

A backbone is any functional `keras.Model` with one image input and a dict output
that has (at least) these end points:

  "low_level": the feature the decoder fuses, [N, ceil(H / s), ceil(W / s), C_low],
    at a stride s finer than "out"'s (4 in the paper and in Xception-65).
  "out": the feature ASPP runs on, [N, ceil(H / os), ceil(W / os), C_out], at the
    output stride os, one of 8, 16 or 32 (it picks the ASPP rates).

Other keys are allowed and unused. The strides are inferred from shapes, not from
layer names: see `feature_strides`.
"""

import keras

from tfseg.models.xception import OUTPUT_STRIDES

LOW_LEVEL = "low_level"
OUT = "out"
END_POINTS = (LOW_LEVEL, OUT)
# A free input size is probed at a multiple of every stride up to MAX_STRIDE, so
# that with 'same' padding each feature size is exactly size / stride.
PROBE_SIZE = 512
MAX_STRIDE = 64


def end_points(backbone):
    """Checks `backbone` against the contract (module docstring).

    Returns (image, features): the backbone's input tensor [N, H, W, C] and
    {"low_level": tensor, "out": tensor}, its own symbolic tensors, so a head
    built on them extends the backbone's graph instead of nesting a copy of it.
    Raises a ValueError saying what is missing.
    """
    # Only functional models have symbolic `inputs`; `output` is their output
    # structure (a subclassed or never-called model has neither).
    inputs = getattr(backbone, "inputs", None)
    outputs = getattr(backbone, "output", None)
    if not isinstance(backbone, keras.Model) or inputs is None or not isinstance(outputs, dict):
        raise ValueError(
            f"backbone: expected a functional keras.Model whose output is a dict with "
            f"keys {list(END_POINTS)}, got {type(backbone).__name__} with output "
            f"{type(outputs).__name__}")
    missing = [key for key in END_POINTS if key not in outputs]
    if missing:
        raise ValueError(f"backbone {backbone.name!r}: its output dict has no {missing} "
                         f"(it has {sorted(outputs)}); DeepLabv3+ needs {list(END_POINTS)}")
    if len(inputs) != 1:
        raise ValueError(f"backbone {backbone.name!r}: expected one image input, got {len(inputs)}")
    for key in END_POINTS:
        if len(outputs[key].shape) != 4:
            raise ValueError(f"backbone {backbone.name!r}: {key!r} must be [N, h, w, C], "
                             f"got shape {outputs[key].shape}")
    return inputs[0], {key: outputs[key] for key in END_POINTS}


def _nearest_stride(size, feature_size):
    # 'same' padding gives ceil(size / stride), a 'valid' stem a little less; the
    # power of two nearest in size, not in ratio, is the stride either way (a
    # ratio can be far off at small sizes: 97 / ceil(97 / 16) is about 14).
    candidates = [2**k for k in range(MAX_STRIDE.bit_length())]
    return min(candidates, key=lambda stride: abs(size / stride - feature_size))


def feature_strides(backbone):
    """{"low_level": stride, "out": stride} of a backbone that meets the contract.

    Inferred from shapes only: the backbone runs shape-only
    (`compute_output_shape`, which adds no nodes to its layers) at its input size,
    or at `PROBE_SIZE` where that size is free, and each end point's stride is the
    power of two for which input size / stride is nearest to its size, the same
    for height and width. Raises a ValueError if they disagree or if "out" is not
    at 8, 16 or 32 and coarser than "low_level".
    """
    image, _ = end_points(backbone)
    height, width = image.shape[1:3]
    probe = (image.shape[0] or 1, height or PROBE_SIZE, width or PROBE_SIZE, image.shape[-1])
    shapes = backbone.compute_output_shape(probe)
    strides = {}
    for key in END_POINTS:
        size = shapes[key][1:3]
        found = {_nearest_stride(probe[1], size[0]), _nearest_stride(probe[2], size[1])}
        if len(found) != 1:
            raise ValueError(
                f"backbone {backbone.name!r}: {key!r} is {size[0]}x{size[1]} for a "
                f"{probe[1]}x{probe[2]} input, which is no single stride; build it with a free "
                f"(None) or a larger input size")
        strides[key] = found.pop()
    if strides[OUT] not in OUTPUT_STRIDES or strides[LOW_LEVEL] >= strides[OUT]:
        raise ValueError(
            f"backbone {backbone.name!r}: 'out' must be at a stride in {OUTPUT_STRIDES} "
            f"and 'low_level' finer; got strides {strides}")
    return strides
