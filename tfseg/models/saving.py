"""A built model made to train in less memory: the rewrite's twins, recomputed segments and
frozen norms, applied by one function (`memory_saving`) to tfseg's DeepLabv3+ or to any
functional Keras model; and DeepLabv3+'s plan for it (`deeplab_saving`), which names its
segments by their parts ("middle", "aspp")."""

import keras

from tfseg import keras_graph, memory
from tfseg.config import RECOMPUTE_HEAD
from tfseg.layers import Recompute
from tfseg.models import freeze as freeze_lib
from tfseg.models import xception

__all__ = ["HEAD_CHUNKS", "deeplab_saving", "head_chunked", "head_segments", "memory_saving"]

# The chunks of channels the decoder's separable convs run their backward passes in
# (`head_chunked`; what it saves: docs/benchmarks.md, "Training step memory").
HEAD_CHUNKS = 4


def memory_saving(model, options=None, *, segments=(), recompute_layer=None,
                  freeze_norms=False):
    """`model` made to train in less memory: rewritten with the twins `options` turns on
    (a `tfseg.memory.RewriteOptions`; None: none) and the `segments` recomputed in the
    backward pass (`tfseg.memory.Segment`s, each wrapped in `recompute_layer`: by
    default `tfseg.layers.Recompute`); then, with `freeze_norms`, every norm made
    non-trainable (`tfseg.models.freeze.freeze_norms`), the twins and the norms inside
    recomputed blocks too. The variables are `model`'s, by path, so checkpoints load
    either way. Nothing to do: `model` itself.

    Example:

    >>> stock = keras.applications.MobileNetV2(weights=None, input_shape=(64, 64, 3))
    >>> saving = memory_saving(stock, tfseg.memory.RewriteOptions())
    >>> sorted(w.path for w in saving.weights) == sorted(w.path for w in stock.weights)
    True
    """
    if options is not None or segments:
        model = memory.rewrite(model, options or memory.RewriteOptions.none(),
                               recompute=list(segments),
                               recompute_layer=recompute_layer or Recompute)
    if freeze_norms:
        freeze_lib.freeze_norms(model)
    return model


def deeplab_saving(model, network, *, twins=False, recompute=(), recompute_layer=None,
                   freeze_batch_norm=False, depthwise_kernel="auto", fused_norm="auto"):
    """tfseg's stock DeepLabv3+ `model`, built by `network` (a `DeepLabV3Plus`), made to
    train in less memory by `memory_saving`, with DeepLab's plan: `twins`, every twin
    (unweighed: a traced step does not see what twins save inside recomputed blocks, and
    DeepLab's savings are measured) with the decoder's separable convs chunked and ASPP's
    branches run one at a time; `recompute` by name (`deeplab_v3_plus`);
    `depthwise_kernel` and `fused_norm`: the twins' kernel forms."""
    recompute = tuple(recompute or ())
    ends = model.end_points
    body = tuple(n for n in recompute if n not in RECOMPUTE_HEAD)
    if body and network.backbone is not None:
        raise ValueError(
            f"recompute={list(body)!r} names Xception-65 blocks, and backbone "
            f"{network.backbone.name!r} is not the built-in Xception-65 (backbone=None); to "
            f"recompute parts of another backbone, pass tfseg.memory.Segment(name, "
            f"start_layer, end_layer)s to tfseg.memory.rewrite")
    options, segments = None, []
    if twins or recompute:
        segments = head_segments(model, ends, recompute, serial_aspp=twins)
        if body:
            segments = xception.recompute_segments(ends, body, network.middle_repeats) + segments
        # Without the twins, recompute alone: every trick off, not only some.
        options = (memory.RewriteOptions.all() if twins
                   else memory.RewriteOptions.none()).replace(
            weigh=False, depthwise_kernel=depthwise_kernel, fused_norm=fused_norm)
        if twins and network.layer_policy().norm == "batch":  # group norm mixes channels
            options = options.replace(chunked=head_chunked(model))
    return memory_saving(model, options, segments=segments, recompute_layer=recompute_layer,
                         freeze_norms=freeze_batch_norm)


def head_chunked(model, chunks=HEAD_CHUNKS):
    """`RewriteOptions.chunked` for the decoder's separable convs: their backward passes
    run first, beside every activation the backbone keeps, and their maps (at 1/4 size)
    are the step's largest transients there. ASPP's (at 1/16 size) are left whole: chunked
    too, they saved nothing more at 513x513 and cost memory at full resolution
    (docs/benchmarks.md, "Training step memory")."""
    return tuple((layer.name, chunks) for layer in model.layers
                 if type(layer) is keras.layers.DepthwiseConv2D
                 and layer.name.startswith("decoder_"))


def head_segments(model, ends, names, serial_aspp=False):
    """The `tfseg.memory.Segment`s of the head named in `names`: "aspp" runs from the
    backbone's output (`ends["out"]`, a layer name) to the ASPP projection (the dropout
    after it draws a new mask each run, so it stays outside), "decoder" from the
    concatenation to its last separable conv (the logits conv after it is small).

    `serial_aspp` (unless "aspp" is recomputed whole): the ASPP branches, up to
    their concatenation, run their backward passes one at a time
    (`tfseg.layers.SerialBranches`), at the price of one more forward run of them."""
    producer = lambda t: keras_graph.producer(t).name  # noqa: E731
    spans = {
        "aspp": (ends["out"], producer(model.get_layer("aspp_dropout").input)),
        "decoder": ("decoder_concat", producer(model.get_layer("logits").input)),
    }
    segments = [memory.Segment(name, *spans[name]) for name in RECOMPUTE_HEAD if name in names]
    if serial_aspp and "aspp" not in names:
        segments.append(memory.Segment("aspp_branches", spans["aspp"][0], "aspp_concat",
                                       branches=True))
    return segments
