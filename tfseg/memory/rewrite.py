"""Rewrite any functional Keras model to use the memory-saving twins, keeping its weights."""

import logging

from tfseg.layers import Recompute
from tfseg.memory.builder import build
from tfseg.memory.graph import as_functional
from tfseg.memory.kept import step_kept_bytes
from tfseg.memory.options import of
from tfseg.memory.paying import example_inputs, may_keep_more, weigh

__all__ = ["as_functional", "rewrite"]

log = logging.getLogger("tfseg.memory")


def rewrite(model, options=None, *, recompute=None, recompute_layer=Recompute):
    """Returns a functional model with the memory-saving twins, the same weights and
    the same variable paths.

    Args:
      model: a functional `keras.Model`.
      options: the `RewriteOptions` saying which tricks apply (each is documented
        there); None: `RewriteOptions()`, every one. `RewriteOptions.none()` changes
        nothing but the `recompute` segments.
      recompute: a sequence of `Segment`s to wrap in `Recompute` (in
        `SerialBranches`: those with `branches=True`). Inside them the other
        rewrites apply too, separable fusion included.
      recompute_layer: the layer class that wraps each segment, called as
        `recompute_layer(block, name=...)` (default `Recompute`); another is for
        comparisons, e.g. `tfseg.profile.anchors.RecomputeGrad` (tf.recompute_grad).

    A model nested inside (a backbone inside a task model, a `Sequential` block:
    `as_functional`) is rewritten the same way, with the same options (`recompute`
    names the outer model's layers only). Every other layer, and every operation
    that is not a layer (`x + y`), is the original's own: the rewritten model
    shares it and its variables with `model`, so train one of the two, not both.
    A twin is a new layer built from its original's config, holding a copy of its
    weights under the same paths. What was rewritten is logged on the
    "tfseg.memory" logger; `changes()` returns it without building.

    The rewrite keeps no map more than `model` does (unless `options.weigh` is False).
    Only an output-only norm can keep one more than its stock layer (its output, where
    another layer keeps its input too: a DenseNet's concatenation feeds a norm and the
    next one; `tfseg.memory.may_keep_more`). Where the rewrite has such a norm and the
    model's input shapes are known, a training step of each model is traced (built as a
    graph, never run; `tfseg.memory.kept`) at them, batch 2 where the batch is open; where
    the rewritten step keeps more bytes than the stock one, the tricks that do not pay
    there are turned off (`tfseg.memory.weigh`) and the summary names them. Where a
    shape is open (None), nothing is weighed and the log says so: `paying(model,
    inputs)` weighs at yours.

    Example:

    >>> stock = keras.applications.MobileNetV2(weights=None, input_shape=(64, 64, 3))
    >>> saving = rewrite(stock)
    >>> unfused = rewrite(stock, RewriteOptions(fuse_separable=False))
    >>> sorted(w.path for w in saving.weights) == sorted(w.path for w in stock.weights)
    True
    """
    options = of(options)
    new_model, summary = build(model, options, recompute, recompute_layer)
    if options.weigh and may_keep_more(model, summary):
        weighed = _never_more(as_functional(model) or model, new_model, options, recompute)
        if weighed is not None:
            new_model, summary = build(model, weighed, recompute, recompute_layer)
    log.info("rewrote %s: %s", new_model.name, summary)
    return new_model


def _never_more(model, new_model, options, recompute):
    """The options that pay on `model` where `new_model`, its rewrite with `options`,
    keeps more than `model` at its input shapes; None where it keeps no more, or where
    it cannot be weighed (the log says why)."""
    inputs = example_inputs(model)
    if inputs is None:
        log.info("%s: not weighed: an input's shape is open (None) past its batch; "
                 "tfseg.memory.paying(model, inputs) weighs the tricks at your inputs' shapes",
                 model.name)
        return None
    try:
        stock, kept = step_kept_bytes(model, inputs), step_kept_bytes(new_model, inputs)
        if kept <= stock:
            return None
        return weigh(model, inputs, options, recompute=recompute).options
    except Exception as error:  # the weighing guards the rewrite and must not break it
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        log.warning("%s: not weighed: tracing its training step failed (%s: %s)", model.name,
                    type(error).__name__, lines[-1][:200] if lines else "")
        return None
