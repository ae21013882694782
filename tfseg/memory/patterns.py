"""Where a functional Keras model can use the memory-saving twins: `changes`, which
runs the rules (`tfseg.memory.rules`) over its graph."""

from tfseg.memory import block_rules, conv_rules, nested_rules, norm_rules  # noqa: F401
from tfseg.memory.matchers import Graph, as_functional
from tfseg.memory.options import of
from tfseg.memory.rules import RULES, Changes, Finding

__all__ = ["Changes", "Graph", "changes"]


def changes(model, options=None, recompute=None):
    """Finds what `rewrite(model, options, recompute=recompute)` would change, without
    building anything: a `Changes`. See `rewrite`; `options` is a `RewriteOptions`
    (None: every trick on). Each rule whose option is on runs once, in its order.

    Example:

    >>> stock = keras.applications.MobileNetV2(weights=None, input_shape=(64, 64, 3))
    >>> changes(stock, RewriteOptions.none()).inplace
    []
    >>> print(changes(stock, RewriteOptions.none().replace(inplace_norm=True)))
    made 52 norms output-only
    """
    options = of(options)
    finding = Finding(as_functional(model) or model, options, recompute)
    for rule in RULES:
        if not rule.options or any(options.on(name) for name in rule.options):
            rule.find(finding)
    return finding.changes
