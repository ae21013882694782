"""DeepLabv3+ on the aligned Xception-65 or on any backbone, as one functional Keras model:
`DeepLabV3Plus` builds the stock network; `deeplab_v3_plus` builds it and, if asked, makes
it train in less memory (`tfseg.models.saving`)."""

import dataclasses
import functools
from typing import Optional

import keras

from tfseg.config import RESIZE_MODES
from tfseg.layers import ResizeLike, ShardedLogits
from tfseg.models import aspp as aspp_lib
from tfseg.models import backbone as backbone_lib
from tfseg.models import decoder as decoder_lib
from tfseg.models import policy as policy_lib
from tfseg.models import saving, xception


@dataclasses.dataclass(frozen=True)
class DeepLabV3Plus:
    """DeepLabv3+ (Chen et al. 2018, https://arxiv.org/abs/1802.02611): the stock network's
    settings; `build(num_classes)` builds it. For the memory-saving network, see
    `deeplab_v3_plus` or `tfseg.models.saving.deeplab_saving`.

    Attributes:
      output_stride: 8, 16 or 32; the ratio of input to encoder-output size. The ASPP
        rates follow it: (12, 24, 36), (6, 12, 18) and none. None: 16 for Xception-65,
        and a backbone's own. A stated one must equal a backbone's: an arbitrary backbone
        cannot be re-dilated.
      norm: "batch", "sync_batch" or "group" (see `LayerPolicy`); with a backbone, for
        the ASPP and decoder only.
      input_shape: (H, W, 3); None sizes accept any input size. Default (None, None, 3).
        With a backbone the input is the backbone's: leave it None.
      width_multiplier: shrinks the network (the ASPP and decoder widths too) for tests
        and CPU runs; 1.0 is the full model.
      middle_repeats: Xception-65's middle-flow units (default 16); None with a backbone.
      dropout: dropout rate after the ASPP projection.
      policy: a full `LayerPolicy`; overrides `norm`.
      backbone: None for the aligned Xception-65, built here. Or any functional
        `keras.Model` with one image input [N, H, W, C] and a dict output with the end
        points "low_level" (the decoder's feature, finer than "out"; stride 4 in the
        paper) and "out" (ASPP's input, at stride 8, 16 or 32); other keys are unused.
        Their strides are inferred from shapes (`tfseg.models.backbone.feature_strides`).
        The head is built on the backbone's own graph, so the model is flat: the
        backbone's input, layers and variables plus the head, whose names ("aspp_*",
        "decoder_*", "logits", "logits_resize") the backbone's must not clash with.
      head_epsilon: the epsilon of the ASPP and decoder norms; None: the policy's (1e-3
        by default, which the backbone keeps). research/deeplab uses 1e-5 there and 1e-3
        in Xception-65: its checkpoints need both.
      resize: the convention of the three bilinear resizes (ASPP pooling, decoder
        upsample, logits to the input size): "half_pixel" (`tf.image.resize`) or
        "align_corners" (TF1's, research/deeplab's; `tfseg.models.REFERENCE_CONVENTIONS`).
      class_shards: > 0: the many-class head for training (`tfseg.layers.ShardedLogits`,
        with the logits conv's variables): the model returns the decoder's features
        [N, H/4, W/4, F] and its loss (`tfseg.training.losses.ShardedPixelLoss`) takes the
        classes in this many shards, never holding all classes' full-size logits. The
        variables and, for one seed, their starting values are the stock head's.
      class_devices: the shards on these devices, at least one each (the split head).
      name: the model's name.

    Input: float images normalised to [-1, 1] (`tfseg.models.normalize`) for Xception-65,
    or what the backbone expects, [N, H, W, 3]. Output: float32 logits
    [N, H, W, num_classes] at the input size. The built model's `end_points` name the
    layer making each of the backbone's features ("stem", "out", each Xception unit).

    Example:

    >>> model = DeepLabV3Plus(width_multiplier=0.125, middle_repeats=1).build(3)
    >>> model(tf.zeros((1, 65, 97, 3))).shape
    TensorShape([1, 65, 97, 3])
    """

    output_stride: Optional[int] = None
    norm: str = "batch"
    input_shape: Optional[tuple] = None
    width_multiplier: float = 1.0
    middle_repeats: Optional[int] = None
    dropout: float = 0.1
    policy: Optional[policy_lib.LayerPolicy] = None
    backbone: Optional[keras.Model] = None
    head_epsilon: Optional[float] = None
    resize: str = "half_pixel"
    class_shards: int = 0
    class_devices: Optional[tuple] = None
    name: str = "deeplab_v3_plus"

    def layer_policy(self):
        """The backbone's `LayerPolicy`: `policy`, else one of `norm`."""
        return self.policy or policy_lib.LayerPolicy(norm=self.norm)

    def build(self, num_classes):
        """The stock network for `num_classes` classes, a functional `keras.Model`."""
        if self.resize not in RESIZE_MODES:
            raise ValueError(f"resize must be one of {RESIZE_MODES}, got {self.resize!r}")
        policy, align_corners = self.layer_policy(), self.resize == "align_corners"
        head_policy = policy
        if self.head_epsilon is not None:
            if not self.head_epsilon > 0:
                raise ValueError(f"head_epsilon must be > 0, got {self.head_epsilon}")
            head_policy = dataclasses.replace(policy, epsilon=self.head_epsilon)
        inputs, features, stride = self._features(policy)
        width = lambda channels: policy_lib.scaled(channels, self.width_multiplier)  # noqa: E731
        x = aspp_lib.aspp(features["out"], head_policy, aspp_lib.ATROUS_RATES[stride],
                          filters=width(256), dropout=self.dropout,
                          align_corners=align_corners)
        sharded = bool(self.class_shards or self.class_devices)
        make_head = functools.partial(
            ShardedLogits, num_classes, shards=self.class_shards or 1,
            devices=self.class_devices, align_corners=align_corners,
            kernel_initializer=policy.kernel_initializer,
            dtype=keras.config.dtype_policy().variable_dtype, name="logits")
        logits = decoder_lib.decoder(x, features["low_level"], head_policy, num_classes,
                                     filters=width(256), low_filters=width(48),
                                     align_corners=align_corners,
                                     make_logits=make_head if sharded else None)
        # Logits stay in the variable dtype (float32 under mixed precision): the loss needs
        # the range.
        outputs = logits if sharded else ResizeLike(
            align_corners, name="logits_resize",
            dtype=keras.config.dtype_policy().variable_dtype)([logits, inputs])
        model = keras.Model(inputs, outputs, name=self.name)
        model.end_points = xception.end_points(features)
        return model

    def _features(self, policy):
        """(image, features, output stride): Xception-65's, built here, or the backbone's;
        refuses the Xception-65-only settings with a backbone, which would otherwise be
        silently ignored."""
        if self.backbone is None:
            stride = 16 if self.output_stride is None else self.output_stride
            inputs = keras.Input(self.input_shape or (None, None, 3), name="image")
            return inputs, xception.xception_features(
                inputs, policy, stride, self.width_multiplier, self.middle_repeats), stride
        given = {"input_shape": self.input_shape, "middle_repeats": self.middle_repeats}
        given = sorted(key for key, value in given.items() if value is not None)
        if given:
            raise ValueError(f"{given} only apply to the built-in Xception-65, not to backbone "
                             f"{self.backbone.name!r}: leave them None")
        image, features = backbone_lib.end_points(self.backbone)
        stride = backbone_lib.feature_strides(self.backbone)[backbone_lib.OUT]
        if self.output_stride not in (None, stride):
            raise ValueError(f"output_stride={self.output_stride}, but backbone "
                             f"{self.backbone.name!r} has its 'out' at stride {stride}")
        return image, features, stride


def deeplab_v3_plus(num_classes, *, memory_saving=False, recompute=None, recompute_layer=None,
                    freeze_batch_norm=False, depthwise_kernel="auto", fused_norm="auto",
                    **network):
    """DeepLabv3+: the stock network of `DeepLabV3Plus(**network)` (its attributes are
    this function's other keyword arguments), made to train in less memory, where asked,
    by `tfseg.models.saving.deeplab_saving` (the command's road too).

    Args:
      num_classes: number of output classes.
      memory_saving: the memory-saving twins (output-only norms, ReLU fused into the next
        conv, lean dilated depthwise convs, separable convs that keep only their input),
        placed by `tfseg.memory.rewrite` on the whole model, backbone included
        (`tfseg.memory.RewriteOptions.all()`). Same variable paths, so weights load
        either way. Without it a `recompute` rewrite applies no other trick.
      recompute: None, or segments that keep only their input and run again in the
        backward pass (`tfseg.layers.Recompute`): Xception-65 block names (e.g.
        ("middle",) or ("entry_block1", "middle", "exit_block1")), each of whose units is
        a segment, single units ("middle_unit3"), and the head's "aspp" (up to its
        projection, before the dropout) and "decoder" (its two separable convs).
        "entry_block2" cannot be recomputed: the decoder uses its inside. With a backbone
        only the head's: pass your own `tfseg.memory.Segment`s to `tfseg.memory.rewrite`.
      recompute_layer: the layer that wraps each `recompute` segment (None:
        `tfseg.layers.Recompute`); see `tfseg.memory.rewrite`.
      freeze_batch_norm: research/deeplab's `fine_tune_batch_norm=False`: every norm
        non-trainable (`tfseg.models.freeze.freeze_norms`), after the rewrite. Batch norms
        then run in inference mode in training too; group norms keep normalising by each
        image's statistics, with gamma and beta fixed. The variables are the same.
      depthwise_kernel, fused_norm: the kernel forms the rewrite's twins take, each twin
        its own (`tfseg.memory.RewriteOptions`' fields of these names, `--depthwise_kernel`
        and `--fused_norm`); "auto": the measured choice.
      **network: `DeepLabV3Plus`'s attributes (output_stride, norm, backbone, ...).

    Example:

    >>> model = deeplab_v3_plus(3, width_multiplier=0.125, middle_repeats=1,
    ...                         memory_saving=True, recompute=("middle",))
    """
    network = DeepLabV3Plus(**network)
    return saving.deeplab_saving(
        network.build(num_classes), network, twins=memory_saving, recompute=recompute,
        recompute_layer=recompute_layer, freeze_batch_norm=freeze_batch_norm,
        depthwise_kernel=depthwise_kernel, fused_norm=fused_norm)


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


def segment_of(layer_name, middle_repeats=None, specs=xception.XCEPTION65):
    """The recompute segment (a `--recompute` name) a layer is in, "" for none: the
    unit of a recomputable block ("entry_block1", "middle_unit3"), "entry_stem", "aspp" or
    "decoder" (its separable convs), for the budget planner's costs. Names are
    matched as `part_of` matches them: prefixes this package gave its layers."""
    owners = [(unit, unit) for spec in specs if spec.name in xception.RECOMPUTABLE
              for unit in xception.unit_names(spec, middle_repeats)]
    owners += [(f"{xception.STEM}{k}", xception.STEM_SEGMENT) for k in (1, 2)]
    owners += [("aspp", "aspp"), ("decoder_conv1", "decoder"), ("decoder_conv2", "decoder")]
    for prefix, segment in owners:
        if layer_name == prefix or layer_name.startswith(prefix + "_"):
            return segment
    return ""
