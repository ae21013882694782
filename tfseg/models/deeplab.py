"""DeepLabv3+ on the aligned Xception-65 or on any backbone, as one functional Keras model."""

import dataclasses

import keras

from tfseg import memory
from tfseg.config import RECOMPUTE_HEAD, RESIZE_MODES
from tfseg.layers import Recompute, ResizeLike, ShardedLogits
from tfseg.models import aspp as aspp_lib
from tfseg.models import backbone as backbone_lib
from tfseg.models import decoder as decoder_lib
from tfseg.models import freeze as freeze_lib
from tfseg.models import policy as policy_lib
from tfseg.models import xception

# The chunks of channels the decoder's separable convs run their backward passes in
# (`head_chunked`; what it saves: docs/benchmarks.md, "Training step memory").
HEAD_CHUNKS = 4


def deeplab_v3_plus(
    num_classes,
    *,
    output_stride=None,
    norm="batch",
    input_shape=None,
    width_multiplier=1.0,
    middle_repeats=None,
    dropout=0.1,
    memory_saving=False,
    recompute=None,
    policy=None,
    backbone=None,
    head_epsilon=None,
    resize="half_pixel",
    freeze_batch_norm=False,
    recompute_layer=None,
    depthwise_kernel="auto",
    fused_norm="auto",
    class_shards=0,
    class_devices=None,
    name="deeplab_v3_plus",
):
    """DeepLabv3+ (Chen et al. 2018, https://arxiv.org/abs/1802.02611).

    Args:
      num_classes: number of output classes.
      output_stride: 8, 16 or 32; the ratio of input to encoder-output size.
        The ASPP rates follow it: (12, 24, 36), (6, 12, 18) and none. None: 16
        for Xception-65, and a backbone's own (inferred, see `backbone`). A
        stated one must equal a backbone's: an arbitrary backbone cannot be
        re-dilated.
      norm: "batch", "sync_batch" or "group" (see `LayerPolicy`); with a
        backbone, for the ASPP and decoder only.
      input_shape: (H, W, 3); None sizes accept any input size. Default
        (None, None, 3). With a backbone the input is the backbone's: leave it None.
      width_multiplier: shrinks the network (the ASPP and decoder widths too)
        for tests and CPU runs; 1.0 is the full model.
      middle_repeats: Xception-65's middle-flow units (default 16); None with a
        backbone.
      dropout: dropout rate after the ASPP projection.
      memory_saving: use the memory-saving twins (output-only norms, ReLU fused
        into the next conv, lean dilated depthwise convs, separable convs that
        keep only their input), placed by `tfseg.memory.rewrite` on the whole
        model, backbone included, so a rewritten stock model and this one are
        the same (`tfseg.memory.RewriteOptions.all()`). Same variable paths, so weights
        load either way. Without it a `recompute` rewrite applies no other trick
        (`RewriteOptions.none()`).
      recompute: None, or segments that keep only their input and run again in
        the backward pass (`tfseg.layers.Recompute`): Xception-65 block names
        (e.g. ("middle",) or ("entry_block1", "middle", "exit_block1")), each of
        whose units is a segment, single units ("middle_unit3"), and the head's
        "aspp" (up to its projection, before the dropout) and "decoder" (its two
        separable convs). "entry_block2" cannot be recomputed: the decoder uses
        its inside. With a backbone only the head's: pass your own
        `tfseg.memory.Segment`s to `tfseg.memory.rewrite` for the backbone's.
      recompute_layer: the layer that wraps each `recompute` segment (None:
        `tfseg.layers.Recompute`); see `tfseg.memory.rewrite`.
      depthwise_kernel, fused_norm: the kernel forms the rewrite's twins take, each
        twin its own (`tfseg.memory.RewriteOptions`' fields of these names,
        `--depthwise_kernel` and `--fused_norm`); "auto": the measured choice.
      policy: a full `LayerPolicy`; overrides `norm`.
      backbone: None for the aligned Xception-65, built here. Or any functional
        `keras.Model` with one image input [N, H, W, C] and a dict output with the
        end points "low_level" (the decoder's feature, finer than "out"; stride 4
        in the paper) and "out" (ASPP's input, at stride 8, 16 or 32); other keys
        are unused. Their strides are inferred from shapes
        (`tfseg.models.backbone.feature_strides`). The ASPP and decoder are built
        on the backbone's own graph, so the model is flat: the backbone's input,
        its layers and variables (training the model trains `backbone`; a
        memory-saving model shares the layers the rewrite keeps and copies the
        replaced ones) plus the head. The backbone's
        layer names must not clash with the head's ("aspp_*", "decoder_*",
        "logits", "logits_resize").
      head_epsilon: the epsilon of the ASPP and decoder norms; None: the
        policy's (1e-3 by default, which the backbone keeps). research/deeplab
        uses 1e-5 there and 1e-3 in Xception-65: its checkpoints need both.
      resize: the convention of the three bilinear resizes (ASPP pooling,
        decoder upsample, logits to the input size): "half_pixel"
        (`tf.image.resize`) or "align_corners" (TF1's
        `resize_bilinear(align_corners=True)`, research/deeplab's).
        `tfseg.models.REFERENCE_CONVENTIONS` holds research/deeplab's pair.
      freeze_batch_norm: research/deeplab's `fine_tune_batch_norm=False`, for
        fine-tuning: every norm is made non-trainable
        (`tfseg.models.freeze.freeze_norms`). Batch norms then run in inference
        mode in training too, with fixed moving statistics, gamma and beta; group
        norms keep normalising by each image's statistics, with gamma and beta
        fixed. The variables are the same, so checkpoints load either way.
      class_shards: > 0: the many-class head for training
        (`tfseg.layers.ShardedLogits`, with the logits conv's variables): the model
        returns the decoder's features [N, H/4, W/4, F] and its loss
        (`tfseg.training.losses.ShardedPixelLoss`) takes the classes in this many
        shards, never holding all classes' full-size logits.
      class_devices: the shards on these devices, at least one each (the split head).

    Input: float images normalised to [-1, 1] (`tfseg.models.normalize`) for
    Xception-65, or what the backbone expects, [N, H, W, 3]. Output: float32
    logits [N, H, W, num_classes] at the input size.
    """
    if policy is None:
        policy = policy_lib.LayerPolicy(norm=norm)
    if resize not in RESIZE_MODES:
        raise ValueError(f"resize must be one of {RESIZE_MODES}, got {resize!r}")
    align_corners = resize == "align_corners"
    head_policy = policy
    if head_epsilon is not None:
        if not head_epsilon > 0:
            raise ValueError(f"head_epsilon must be > 0, got {head_epsilon}")
        head_policy = dataclasses.replace(policy, epsilon=head_epsilon)
    if backbone is None:
        output_stride = 16 if output_stride is None else output_stride
        inputs = keras.Input(input_shape or (None, None, 3), name="image")
        features = xception.xception_features(
            inputs, policy, output_stride, width_multiplier, middle_repeats
        )
    else:
        inputs, features, output_stride = _backbone_features(
            backbone, output_stride, input_shape, middle_repeats, recompute
        )
    x = aspp_lib.aspp(
        features["out"],
        head_policy,
        aspp_lib.ATROUS_RATES[output_stride],
        filters=policy_lib.scaled(256, width_multiplier),
        dropout=dropout,
        align_corners=align_corners,
    )
    head = None
    if class_shards or class_devices:
        head = ShardedLogits(num_classes, shards=class_shards or 1, devices=class_devices,
                             align_corners=align_corners,
                             kernel_initializer=policy.kernel_initializer,
                             dtype=keras.config.dtype_policy().variable_dtype, name="logits")
    logits = decoder_lib.decoder(
        x,
        features["low_level"],
        head_policy,
        num_classes,
        filters=policy_lib.scaled(256, width_multiplier),
        low_filters=policy_lib.scaled(48, width_multiplier),
        align_corners=align_corners,
        logits=head,
    )
    # Logits stay in the variable dtype (float32 under mixed precision): the loss needs the range.
    outputs = logits if head is not None else ResizeLike(
        align_corners, name="logits_resize",
        dtype=keras.config.dtype_policy().variable_dtype)([logits, inputs])
    model = keras.Model(inputs, outputs, name=name)
    if memory_saving or recompute:
        recompute = tuple(recompute or ())
        segments = head_segments(model, features, recompute, serial_aspp=memory_saving)
        if backbone is None:  # a backbone's own names were refused above
            body = tuple(n for n in recompute if n not in RECOMPUTE_HEAD)
            segments = xception.recompute_segments(features, body, middle_repeats) + segments
        # Without memory_saving, recompute alone: every trick off, not only some.
        # Unweighed: a traced step does not see what twins save inside recomputed blocks, and
        # DeepLab's savings are measured (docs/benchmarks.md, "Training step memory").
        options = (memory.RewriteOptions.all() if memory_saving
                   else memory.RewriteOptions.none()).replace(
            weigh=False, depthwise_kernel=depthwise_kernel, fused_norm=fused_norm)
        if memory_saving and head_policy.norm == "batch":  # group norm mixes channels
            options = options.replace(chunked=head_chunked(model))
        model = memory.rewrite(model, options, recompute=segments,
                               recompute_layer=recompute_layer or Recompute)
    if freeze_batch_norm:
        # After the rewrite, so the twins and the norms inside Recompute blocks are frozen too.
        freeze_lib.freeze_norms(model)
    return model


def _backbone_features(backbone, output_stride, input_shape, middle_repeats, recompute):
    """(image, features, output stride) of a passed backbone; refuses the
    Xception-65-only options, which would otherwise be silently ignored."""
    body = [name for name in recompute or () if name not in RECOMPUTE_HEAD]
    if body:
        raise ValueError(
            f"recompute={body!r} names Xception-65 blocks, and backbone "
            f"{backbone.name!r} is not the built-in Xception-65 (backbone=None); to "
            f"recompute parts of another backbone, pass tfseg.memory.Segment(name, "
            f"start_layer, end_layer)s to tfseg.memory.rewrite")
    given = {"input_shape": input_shape, "middle_repeats": middle_repeats}
    given = sorted(key for key, value in given.items() if value is not None)
    if given:
        raise ValueError(f"{given} only apply to the built-in Xception-65, not to backbone "
                         f"{backbone.name!r}: leave them None")
    image, features = backbone_lib.end_points(backbone)
    stride = backbone_lib.feature_strides(backbone)[backbone_lib.OUT]
    if output_stride not in (None, stride):
        raise ValueError(f"output_stride={output_stride}, but backbone {backbone.name!r} "
                         f"has its 'out' at stride {stride}")
    return image, features, stride


def head_chunked(model, chunks=HEAD_CHUNKS):
    """`RewriteOptions.chunked` for the decoder's separable convs: their backward passes
    run first, beside every activation the backbone keeps, and their maps (at 1/4 size)
    are the step's largest transients there. ASPP's (at 1/16 size) are left whole: chunked
    too, they saved nothing more at 513x513 and cost memory at full resolution
    (docs/benchmarks.md, "Training step memory")."""
    return tuple((layer.name, chunks) for layer in model.layers
                 if type(layer) is keras.layers.DepthwiseConv2D
                 and part_of(layer.name) == "decoder")


def head_segments(model, features, names, serial_aspp=False):
    """The `tfseg.memory.Segment`s of the head named in `names`: "aspp" runs from
    the backbone's output to the ASPP projection (the dropout after it draws a new
    mask each run, so it stays outside), "decoder" from the concatenation to its
    last separable conv (the logits conv after it is small).

    `serial_aspp` (unless "aspp" is recomputed whole): the ASPP branches, up to
    their concatenation, run their backward passes one at a time
    (`tfseg.layers.SerialBranches`), at the price of one more forward run of them."""
    producer = lambda t: t._keras_history.operation.name  # noqa: E731
    ends = {
        "aspp": (producer(features["out"]), producer(model.get_layer("aspp_dropout").input)),
        "decoder": ("decoder_concat", producer(model.get_layer("logits").input)),
    }
    segments = [memory.Segment(name, *ends[name]) for name in RECOMPUTE_HEAD if name in names]
    if serial_aspp and "aspp" not in names:
        segments.append(memory.Segment("aspp_branches", ends["aspp"][0], "aspp_concat",
                                       branches=True))
    return segments


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
