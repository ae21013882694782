"""Aligned Xception-65, the DeepLabv3+ backbone, described as data.

Chen et al., "Encoder-Decoder with Atrous Separable Convolution for Semantic Image
Segmentation", ECCV 2018, https://arxiv.org/abs/1802.02611 (Section 3.2), following
the reference `research/deeplab/core/xception.py`.
"""

import dataclasses

import keras

from tfseg import keras_graph
from tfseg.config import RECOMPUTE_BLOCKS, unit_name
from tfseg.memory import Segment
from tfseg.models import policy as policy_lib


@dataclasses.dataclass(frozen=True)
class BlockSpec:
    """One Xception block: three separable convs plus a shortcut.

    Args:
      name: layer-name prefix, e.g. "entry_block1". Repeated blocks are named
        "{name}_unit{k}" (k from 1).
      filters: the widths of the three separable convs.
      stride: the stride of the third separable conv (and of a conv shortcut).
      shortcut: "conv" (1x1 conv + norm), "identity" or "none".
      repeats: how many identical units the block has.
      relu_inside: ReLU between depthwise and pointwise (and after pointwise)
        instead of before the depthwise conv.
      low_level: this block's second separable conv is the stride-4 feature
        that the decoder uses.
      flow: "entry_flow", "middle_flow" or "exit_flow" (for memory reports).
    """

    name: str
    filters: tuple
    stride: int
    shortcut: str
    repeats: int = 1
    relu_inside: bool = False
    low_level: bool = False
    flow: str = "entry_flow"


XCEPTION65 = (
    BlockSpec("entry_block1", (128, 128, 128), 2, "conv"),
    BlockSpec("entry_block2", (256, 256, 256), 2, "conv", low_level=True),
    BlockSpec("entry_block3", (728, 728, 728), 2, "conv"),
    BlockSpec("middle", (728, 728, 728), 1, "identity", repeats=16, flow="middle_flow"),
    BlockSpec("exit_block1", (728, 1024, 1024), 2, "conv", flow="exit_flow"),
    BlockSpec("exit_block2", (1536, 1536, 2048), 1, "none", relu_inside=True, flow="exit_flow"),
)
# Backbone blocks whose units can be recomputed ("entry_block2" cannot: the decoder
# uses its inside), and the default choice: the largest activations per second of
# recompute (entry block 1 at stride 2-4, and the 16 middle units).
# The names are defined with the config (which imports no TensorFlow), checked here.
RECOMPUTABLE = RECOMPUTE_BLOCKS
DEFAULT_RECOMPUTE = ("entry_stem", "entry_block1", "middle")
STEM = "entry_conv"  # the two stem convs: entry_conv1, entry_conv2 (entry flow)
STEM_SEGMENT = "entry_stem"  # the recompute segment of the two (after entry_conv1_pad)

OUTPUT_STRIDES = (8, 16, 32)


def _unit(x, spec, filters, policy, name, strides, rate):
    inputs, low_level = x, None
    for i, width in enumerate(filters):
        x = policy_lib.separable_conv(
            x,
            width,
            policy,
            f"{name}_sepconv{i + 1}",
            strides=strides if i == len(filters) - 1 else 1,
            rate=rate,
            relu_inside=spec.relu_inside,
        )
        if i == 1:
            low_level = x
    if spec.shortcut == "conv":
        shortcut = _conv_shortcut(inputs, filters[-1], policy, name, strides)
        shortcut = policy_lib.norm(shortcut, policy, f"{name}_shortcut_bn")
        x = keras.layers.Add(name=f"{name}_add")([x, shortcut])
    elif spec.shortcut == "identity":
        x = keras.layers.Add(name=f"{name}_add")([x, inputs])
    return x, low_level


# oneDNN's CPU kernel for the filter gradient of a strided 1x1 convolution corrupts the
# heap when the input has few channels (8 to 15 crashed; 3, and 16 and more, did not) and
# an even side (its last row is not read): at width 0.125 a training step aborted on
# crops such as 96x96 and 128x128. Taking every second pixel first and then a 1x1
# convolution of stride 1 is the same maths with the same kernel, so only such narrow
# shortcuts are built that way; an average over one pixel keeps nothing for its gradient.
_NARROW_SHORTCUT = 16


def _conv_shortcut(inputs, filters, policy, name, strides):
    """The 1x1 convolution (``{name}_shortcut``) of a unit's input to its output's size."""
    if strides != 1 and inputs.shape[-1] < _NARROW_SHORTCUT:
        inputs = keras.layers.AveragePooling2D(
            1, strides, name=f"{name}_shortcut_subsample")(inputs)
        strides = 1
    return keras.layers.Conv2D(
        filters,
        1,
        strides=strides,
        use_bias=False,
        kernel_initializer=policy.kernel_initializer,
        name=f"{name}_shortcut",
    )(inputs)


def unit_names(spec, middle_repeats=None):
    """The names of a block's units: "entry_block1", or "middle_unit1", ..."""
    if spec.repeats == 1:
        return [spec.name]
    return [unit_name(spec.name, k + 1) for k in range(middle_repeats or spec.repeats)]


def end_points(features):
    """{key: the name of the layer making it} of a dict of symbolic tensors (the features
    of `xception_features`, or a backbone's end points): what segments are cut at."""
    return {key: keras_graph.producer(t).name for key, t in features.items()}


def recompute_segments(ends, names, middle_repeats=None, specs=XCEPTION65):
    """`tfseg.memory.Segment`s for every unit of the named blocks (e.g. ("middle",))
    and for the named units (e.g. ("middle_unit3",)).

    `ends` names the layer that makes each of `xception_features`' outputs ("stem", each
    unit's name). Each segment runs from the previous unit's output to this unit's output. Only the units of
    `RECOMPUTABLE` blocks can be: other names raise a ValueError naming them.
    """
    units = {spec.name: unit_names(spec, middle_repeats) for spec in specs}
    allowed = set(RECOMPUTABLE) | {u for block in RECOMPUTABLE for u in units.get(block, ())}
    bad = [name for name in names if name not in allowed]
    if bad:
        raise ValueError(
            f"recompute: cannot recompute {bad}; recomputable blocks: {list(RECOMPUTABLE)}")
    previous, segments = ends["stem"], []
    if STEM_SEGMENT in names:  # from the padded image: the model's input starts no segment
        segments.append(Segment(STEM_SEGMENT, f"{STEM}1_pad", previous))
    for spec in specs:
        for name in units[spec.name]:
            if spec.name in names or name in names:
                segments.append(Segment(name, previous, ends[name]))
            previous = ends[name]
    return segments


def xception_features(
    inputs,
    policy=policy_lib.LayerPolicy(),
    output_stride=16,
    width_multiplier=1.0,
    middle_repeats=None,
    specs=XCEPTION65,
):
    """Builds the backbone on `inputs` and returns its features.

    Strides past `output_stride` become dilation, as in the reference
    `stack_blocks_dense`: once the running stride reaches `output_stride`, each
    further unit runs at stride 1 with the current rate, and the rate grows by
    the stride it skipped.

    Returns:
      A dict: "stem", one entry per unit name ("entry_block1", ...,
      "middle_unit16", "exit_block2"), "low_level" (stride 4) and "out" (the
      last feature, at `output_stride`).
    """
    if output_stride not in OUTPUT_STRIDES:
        raise ValueError(f"output_stride must be one of {OUTPUT_STRIDES}, got {output_stride}")
    width = lambda c: policy_lib.scaled(c, width_multiplier)  # noqa: E731
    x = policy_lib.conv_norm_relu(inputs, width(32), policy, f"{STEM}1", 3, strides=2)
    x = policy_lib.conv_norm_relu(x, width(64), policy, f"{STEM}2", 3)
    features = {"stem": x}
    current_stride, rate = 2, 1
    for spec in specs:
        for name in unit_names(spec, middle_repeats):
            if current_stride == output_stride:
                strides, unit_rate = 1, rate
                rate *= spec.stride
            else:
                strides, unit_rate = spec.stride, 1
                current_stride *= spec.stride
            filters = tuple(width(f) for f in spec.filters)
            x, low_level = _unit(x, spec, filters, policy, name, strides, unit_rate)
            features[name] = x
            if spec.low_level:
                features["low_level"] = low_level
    features["out"] = x
    return features


def xception65(
    input_shape=(None, None, 3),
    policy=policy_lib.LayerPolicy(),
    output_stride=16,
    width_multiplier=1.0,
    middle_repeats=None,
    name="xception65",
):
    """The backbone alone, as a `keras.Model` whose output is the features dict."""
    inputs = keras.Input(input_shape, name="image")
    features = xception_features(inputs, policy, output_stride, width_multiplier, middle_repeats)
    return keras.Model(inputs, features, name=name)
