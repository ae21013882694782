"""The rules for norms, attention and subclassed blocks: output-only norms, their
residual adds, lean attention, and twins inside rebuilt copies of blocks."""

from tfseg.memory.inside import inner_twins, why_not_rebuilt
from tfseg.layers.elementwise import is_plain_relu
from tfseg.memory.matchers import residual_folds
from tfseg.memory.plans import DROPS, FoldedNorm, Rebuilt
from tfseg.memory.rules import record, rule
from tfseg.memory.twins import twin_rule

record("inplace", lambda names: f"made {len(names)} norms output-only")
record("residual", lambda pairs: f"folded {len(pairs)} residual adds into their norms")
record("layer_norms", lambda names: f"made {len(names)} layer norms output-only")
record("attention", lambda names: f"made {len(names)} attention layers lean")
record("inside", lambda twins: (
    f"made {sum(t.twin is not t.stock for ts in twins.values() for t in ts)} more inside "
    f"{len(twins)} subclassed layers"), kind=dict)
record("traced", lambda names: f"took apart {len(names)} subclassed layers traced from "
                               f"their calls")
record("untraced", lambda whys: "; ".join(f"kept {name} whole, not traced: {why}"
                                          for name, why in whys.items()), kind=dict)
record("idle_norms", lambda names: (
    f"kept {len(names)} norms stock: a stock ReLU reads each and keeps its output, so an "
    f"output-only norm would save nothing"))
record("kept_stock", lambda kept: "; ".join(f"kept {name} stock: {why}" for name, why in kept))


@rule("traced_blocks", option="trace_blocks")
def traced_blocks(finding):
    """Names the subclassed blocks taken apart from traces of their calls, which
    `tfseg.memory.patterns.changes` does before the rules run (`traced.inline`), and
    each block kept whole with the test its trace failed."""
    for name in finding.taken_apart:
        finding.add("traced", name)
    for item in finding.untraced.items():
        finding.add("untraced", item)


# Stock `BatchNormalization` and `GroupNormalization` as their output-only twins; then
# `LayerNormalization` and `RMSNormalization` (a layer norm whose gamma starts at zero
# stays stock, and the summary says why); then `MultiHeadAttention` as
# `LeanMultiHeadAttention`: `TWINS`' rows.
twin_rule("norms", "inplace")
twin_rule("layer_norms", "layer_norms")
twin_rule("attention", "attention")


@rule("inside_blocks")
def inside_blocks(finding):
    """Subclassed layers as copies rebuilt with twins inside (`tfseg.memory.inside`);
    each of the options decides for its own twins there. A layer whose copy would not
    rebuild (a keras-hub config that leaves out an argument) is kept, and the summary
    says why."""
    inside, kept = finding.changes.inside, finding.changes.kept_stock
    for node in finding.open_nodes():
        layer = node.operation
        if layer.name not in inside:
            twins, why = inner_twins(layer, finding.options)
            not_rebuilt = why_not_rebuilt(layer, twins, node) if twins else None
            why += [(layer.name, not_rebuilt)] if not_rebuilt else []
            for item in [k for k in why if k not in kept]:
                finding.add("kept_stock", item)
            if twins and not not_rebuilt:
                finding.add("inside", (layer.name, twins))
        if layer.name in inside:
            finding.claim(node, plan=Rebuilt(inside[layer.name]))


@rule("idle_norms", option="inplace_norm")
def idle_norms(finding):
    """Keeps stock the norms whose every reader is a plain ReLU left stock by the rules
    before. That ReLU keeps its output for its gradient, so an output-only norm would
    keep its own output beside it, as many bytes as stock's input, and its backward
    needs more temporaries than stock's fused one: it saves nothing and raises the peak."""
    # A node in a block (a recomputed segment, a fused separable conv) is run by it.
    planned = finding.changes.actions.keys() | finding.taken
    idle, busy, norms = set(), set(), {}
    for node in finding.graph.nodes:
        name = node.operation.name
        if name not in finding.changes.inplace:
            continue
        readers = finding.graph.consumers[id(node.outputs[0])]
        stock_relus = readers and all(
            is_plain_relu(r.operation) and id(r) not in planned
            and r.operation.name not in finding.replaced for r in readers)
        (idle if stock_relus and id(node) not in planned else busy).add(name)
        norms[name] = node.operation
    for name in sorted(idle - busy):
        finding.claim(norms[name], stock=True, record=("idle_norms", name))


@rule("residual_folds", option="fold_residual")
def residual_fold(finding):
    """A two-input `Add` right after an output-only norm, into the norm
    (`matchers.residual_folds`); where a shared ReLU's reader, the norm adds relu(it)."""
    changes = finding.changes
    folds = residual_folds(finding.graph, finding.taken,
                           set(changes.inplace) | set(changes.layer_norms))
    if not finding.relu_residuals <= set(folds):
        raise AssertionError("a shared ReLU's add was marked to fold and is not folded")
    by_id = {id(node): node for node in finding.graph.nodes}
    for add, (norm, other) in folds.items():
        finding.claim(norm, plan=DROPS,
                      record=("residual", (norm.operation.name, by_id[add].operation.name)))
        finding.claim(by_id[add], plan=FoldedNorm(norm, other, relu=add in finding.relu_residuals))
