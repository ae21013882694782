"""Where a functional Keras model can use the memory-saving twins: `changes`, which
runs the rules (`tfseg.memory.rules`) over its graph."""

import keras

from tfseg import keras_graph
from tfseg.memory import block_rules, conv_rules, nested_rules, norm_rules  # noqa: F401
from tfseg.memory.graph import Graph, as_functional, nested_model
from tfseg.memory.options import of
from tfseg.memory.rules import RULES, Changes, Finding
from tfseg.memory.traced import inline

__all__ = ["Changes", "Graph", "changes"]


def changes(model, options=None, recompute=None):
    """Finds what `rewrite(model, options, recompute=recompute)` would change, without
    building the model: a `Changes` (a subclassed layer's copy is built alone, on new
    inputs, to know that it rebuilds). See `rewrite`; `options` is a `RewriteOptions`
    (None: every trick on). Each rule whose option is on runs once, in its order.

    Example:

    >>> stock = keras.applications.MobileNetV2(weights=None, input_shape=(64, 64, 3))
    >>> changes(stock, RewriteOptions.none()).inplace
    []
    >>> print(changes(stock, RewriteOptions.none().replace(inplace_norm=True)))
    made 52 norms output-only
    """
    options = of(options)
    model, taken, untraced = flat(model, options)
    finding = Finding(model, options, recompute, traced=(taken, untraced))
    for rule in RULES:
        if not rule.options or any(options.on(name) for name in rule.options):
            rule.find(finding)
    found = finding.changes
    # The models nested here (a task model's backbone), as `rewrite` rewrites them.
    for node in finding.graph.nodes:
        nested = nested_model(node.operation)
        if nested is not None and node.operation.name not in found.nested:
            found.nested[node.operation.name] = changes(cut(nested, found.cuts), options)
    return found


def flat(model, options):
    """(`model` as the rules read it: functional, and with `options.trace_blocks` its
    blocks taken apart (`tfseg.memory.traced.inline`); the names of those blocks;
    {the name of a block kept whole: why}). The same model `build` rewrites."""
    model = as_functional(model) or model
    if not options.trace_blocks:
        return model, [], {}
    Graph(model)  # a model without a graph: the error that says what to do
    return inline(model)


def cut(nested, cuts):
    """`nested` ending or starting where a rule of the model it is in moved its end or
    start to the layer after or before it (`Changes.cuts`)."""
    cut_at = cuts.get(nested.name, {})
    if "end" in cut_at:  # its upsampling goes to the conv after
        nested = keras.Model(keras_graph.input_structure(nested), cut_at["end"],
                             name=nested.name)
    if "start" in cut_at:  # its first conv takes in the concat
        outputs = nested.outputs[0] if len(nested.outputs) == 1 else nested.outputs
        nested = keras.Model(cut_at["start"], outputs, name=nested.name)
    return nested
