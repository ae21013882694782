"""Keep stock where a twin does not pay: `paying` weighs each trick of the rewrite by the
bytes a traced training step keeps (`tfseg.memory.kept`), with it and without it.

A twin keeps other tensors than its stock layer does: an output-only norm keeps its
output where stock keeps its input. Where another layer keeps that input anyway (a
NASNet cell gives one tensor to several branches), the twin adds a buffer and saves
none. Which tricks pay depends on the model, so it is measured, not guessed: each step
is traced (built as a graph, never run), which takes seconds, not a training step's
memory.
"""

import dataclasses

import tensorflow as tf

from tfseg.memory.builder import build
from tfseg.memory.graph import Graph, as_functional, nested_model
from tfseg.memory.kept import step_kept_bytes
from tfseg.memory.options import of
from tfseg.memory.patterns import changes, cut
from tfseg.memory.traced import inline

__all__ = ["Weighed", "example_inputs", "may_keep_more", "paying", "weigh"]

# The batch a model whose batch is open is weighed at: the kept bytes of its activations
# grow with the batch, a norm's statistics do not.
EXAMPLE_BATCH = 2


@dataclasses.dataclass(frozen=True)
class Weighed:
    """What `weigh` found: the `options` to rewrite with (the tricks that pay; their
    `unpaid` names the others), and the bytes the traced step keeps with them (`kept`)
    and with the stock model (`stock`)."""

    options: object
    kept: int
    stock: int


def weigh(model, inputs, options=None, *, recompute=None):
    """Weighs each trick of `options` (None: every one) on `model`: turned off, one at a
    time in `RewriteOptions`' order, where the rewrite's step then keeps fewer bytes;
    and if what is left still keeps more than the stock step, every trick off. A trick
    that changes nothing in `model` is left as it is, and so is one whose step keeps the
    same bytes either way: the kept bytes do not see what a twin saves inside a
    `Recompute` block's second run (DeepLab's dilated and ReLU-depthwise twins, inside
    its separable convs, weigh nothing here). Each weighing traces one step of one
    rewrite.

    Args:
      model: a functional `keras.Model` (or a `Sequential`), as `rewrite` takes.
      inputs: example inputs, a tensor or the structure the model takes, at the size
        (and batch) it will train at: what pays can depend on it.
      options: the `RewriteOptions` to start from; None: `RewriteOptions()`.
      recompute: the `Segment`s to recompute, as `rewrite` takes them (kept in every
        weighing).

    Returns:
      A `Weighed`.
    """
    options = of(options)
    model = as_functional(model) or model
    inputs = tf.nest.map_structure(tf.convert_to_tensor, inputs)
    stock = step_kept_bytes(model, inputs)
    kept = step_kept_bytes(build(model, options, recompute)[0], inputs)
    unpaid = []
    for name in options.names():
        if not options.on(name):
            continue
        fewer = options.replace(**{name: False})
        if _same(changes(model, fewer, recompute), changes(model, options, recompute)):
            continue  # nothing of this trick here (or it needs one already off)
        without = step_kept_bytes(build(model, fewer, recompute)[0], inputs)
        if without < kept:
            unpaid.append((name, kept, without))
            options, kept = fewer, without
    if kept > stock and not recompute:  # together they cost: no trick at all
        unpaid += [(name, kept, stock) for name in options.names() if options.on(name)]
        # Every switch off; the settings (the kernel forms) stay as given.
        options, kept = options.replace(**dict.fromkeys(options.names(), False)), stock
    return Weighed(options.replace(unpaid=tuple(unpaid)), kept, stock)


def paying(model, inputs, options=None, *, recompute=None):
    """The `RewriteOptions` whose tricks pay on `model` at `inputs`' size (`weigh`):
    rewrite with them, and the summary names the tricks turned off.

    Example:

    >>> stock = keras.applications.NASNetMobile(weights=None, input_shape=(32, 32, 3))
    >>> images = tf.zeros((2, 32, 32, 3))
    >>> saving = rewrite(stock, paying(stock, images))  # every trick pays here
    >>> # logs: rewrote nasnet_mobile: fused 187 activation+layer pairs; made 160
    >>> # SeparableConv2D layers keep only their input; made 192 norms output-only; ...
    >>> step_kept_bytes(saving, images) < step_kept_bytes(stock, images)
    True
    """
    return weigh(model, inputs, options, recompute=recompute).options


def may_keep_more(model, summary):
    """Whether the rewrite `summary` (`model`'s `Changes`) finds may keep a map more
    than `model` does, so that it is worth weighing. An output-only norm keeps its
    output where stock's keeps its input: a map more where another layer reads the input
    too (and may keep it: a DenseNet's concatenation, a pre-activation ResNet's block
    input), and maybe where a norm's readers cannot be seen (inside a subclassed layer);
    elsewhere at most its per-channel statistics more. Every other twin keeps a tensor of
    its stock layer's size, or less: an activation's input for its output, a block's
    input for its maps, a norm's sum for its output.

    Example:

    >>> model = keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3))
    >>> may_keep_more(model, changes(model))  # each norm's input: one conv's output
    False
    """
    model = inline(as_functional(model))[0] if summary.traced else as_functional(model) or model
    graph = Graph(model)
    norms = set(summary.inplace) | set(summary.layer_norms)
    for node in graph.nodes:
        if node.operation.name in norms and any(
                len(graph.consumers[id(t)]) > 1 for t in node.input_tensors):
            return True
        nested = nested_model(node.operation)
        inner = summary.nested.get(node.operation.name)
        if nested is not None and inner is not None and may_keep_more(
                cut(nested, summary.cuts), inner):
            return True
    return any(t.twin is not t.stock for twins in summary.inside.values() for t in twins)


def example_inputs(model, batch=EXAMPLE_BATCH):
    """Zeros in the structure, shapes and dtypes of `model`'s inputs, `batch` where its
    batch is open; None where another dimension is open (None).

    Example:

    >>> model = keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3))
    >>> example_inputs(model).shape
    TensorShape([2, 32, 32, 3])
    """
    if any(None in tuple(t.shape)[1:] for t in model.inputs):
        return None
    return tf.nest.map_structure(
        lambda t: tf.zeros((t.shape[0] or batch,) + tuple(t.shape)[1:], t.dtype), model.input)


def _same(a, b):
    """Whether two `Changes` change the same layers in the same ways."""
    return (a.records == b.records and a.replacements.keys() == b.replacements.keys()
            and a.nested.keys() == b.nested.keys()
            and all(_same(a.nested[name], b.nested[name]) for name in a.nested))
