"""DeepLabv3+ with an aligned Xception-65 backbone, as one functional Keras model."""

import keras

from tfseg.layers import ResizeLike
from tfseg.models import aspp as aspp_lib
from tfseg.models import decoder as decoder_lib
from tfseg.models import policy as policy_lib
from tfseg.models import xception


def deeplab_v3_plus(
    num_classes,
    *,
    output_stride=16,
    norm="batch",
    input_shape=(None, None, 3),
    width_multiplier=1.0,
    middle_repeats=None,
    dropout=0.1,
    memory_saving=False,
    recompute=None,
    policy=None,
    name="deeplab_v3_plus",
):
    """DeepLabv3+ (Chen et al. 2018, https://arxiv.org/abs/1802.02611).

    Args:
      num_classes: number of output classes.
      output_stride: 8, 16 or 32; the ratio of input to encoder-output size.
        The ASPP rates follow it: (12, 24, 36), (6, 12, 18) and none.
      norm: "batch", "sync_batch" or "group" (see `LayerPolicy`).
      input_shape: (H, W, 3); None sizes accept any input size.
      width_multiplier, middle_repeats: shrink the network for tests and CPU
        runs. The defaults (1.0, 16) are the full Xception-65.
      dropout: dropout rate after the ASPP projection.
      memory_saving: use the memory-saving twins (output-only norms, ReLU fused
        into the next conv, lean dilated depthwise convs), placed by
        `tfseg.memory.rewrite`, so a rewritten stock model and this one are the
        same. Same variables, so weights load either way.
      recompute: None, or backbone block names (e.g. ("middle",) or
        ("entry_block1", "middle", "exit_block1")) whose units keep only their
        input and run again in the backward pass (`tfseg.layers.Recompute`).
        "entry_block2" cannot be recomputed: the decoder uses its inside.
      policy: a full `LayerPolicy`; overrides `norm`.

    Input: float images normalised to [-1, 1] (`tfseg.models.normalize`),
    [N, H, W, 3]. Output: float32 logits [N, H, W, num_classes] at the input size.
    """
    if policy is None:
        policy = policy_lib.LayerPolicy(norm=norm)
    inputs = keras.Input(input_shape, name="image")
    features = xception.xception_features(
        inputs, policy, output_stride, width_multiplier, middle_repeats
    )
    x = aspp_lib.aspp(
        features["out"],
        policy,
        aspp_lib.ATROUS_RATES[output_stride],
        filters=policy_lib.scaled(256, width_multiplier),
        dropout=dropout,
    )
    logits = decoder_lib.decoder(
        x,
        features["low_level"],
        policy,
        num_classes,
        filters=policy_lib.scaled(256, width_multiplier),
        low_filters=policy_lib.scaled(48, width_multiplier),
    )
    # Logits stay in the variable dtype (float32 under mixed precision): the loss needs the range.
    outputs = ResizeLike(name="logits_resize", dtype=keras.config.dtype_policy().variable_dtype)(
        [logits, inputs]
    )
    model = keras.Model(inputs, outputs, name=name)
    if memory_saving or recompute:
        from tfseg import memory

        segments = xception.recompute_segments(features, recompute or (), middle_repeats)
        model = memory.rewrite(
            model,
            fuse_separable=memory_saving,
            fuse_relu_depthwise=memory_saving,
            fuse_relu_conv=memory_saving,
            inplace_norm=memory_saving,
            lean_dilated=memory_saving,
            recompute=segments,
        )
    return model


def part_of(layer_name, middle_repeats=None, specs=xception.XCEPTION65):
    """The part of DeepLabv3+ a layer belongs to, for memory reports.

    Every layer name starts with a name this package gave it: a unit name from the
    block specs (or the unit's `Recompute` wrapper, named exactly that), the stem,
    "aspp", "decoder" or "logits". Returns "" for names it did not make.
    """
    owners = [(f"{xception.STEM}{i}", "entry_flow") for i in (1, 2)]
    owners += [("aspp", "aspp"), ("decoder", "decoder"), ("logits", "decoder")]
    for spec in specs:
        owners += [(unit, spec.flow) for unit in xception.unit_names(spec, middle_repeats)]
    for prefix, part in owners:
        if layer_name == prefix or layer_name.startswith(prefix + "_"):
            return part
    return ""


def normalize(images):
    """uint8 (or 0-255 float) images -> the model's input range [-1, 1]."""
    return keras.ops.cast(images, "float32") / 127.5 - 1.0
