"""The rules that make blocks of nodes: recompute segments and fused separable convs."""

import keras

from tfseg.memory.matchers import relu_start, separable_chain
from tfseg.memory.plans import Block
from tfseg.memory.rules import record, rule
from tfseg.memory.segments import branch_nodes, segment_nodes

record("recomputed", lambda names: f"recomputing {len(names)} blocks ({', '.join(names)})")
record("separable", lambda pairs: f"fused {len(pairs)} separable convs")


@rule("recompute_segments", order=0)
def recompute_segments(finding):
    """Each `recompute` segment as a `Block`; where a plain ReLU only the segment reads
    makes its input, the segment starts before it (`relu_start`)."""
    graph, changes = finding.graph, finding.changes
    for segment in finding.recompute:
        inside, start, end = segment_nodes(graph, segment)
        relu = relu_start(graph, start, inside | finding.taken)
        if relu is not None:  # the block keeps the norm's output, kept anyway
            inside, start = inside | {id(relu)}, relu.input_tensors[0]
        if inside & finding.taken:
            raise ValueError(f"recompute segment {segment.name!r} overlaps another")
        finding.taken |= inside
        finding.segment_of.update(dict.fromkeys(inside, segment.name))
        branches = None
        if segment.branches:
            shared = set() if relu is None else {id(relu)}
            branches = branch_nodes(segment, inside, start, end, shared)
        changes.blocks[id(end)] = Block(segment.name, frozenset(inside), start,
                                        branches=branches)
        finding.add("recomputed", segment.name)


@rule("separable", order=10, option="fuse_separable")
def separable(finding):
    """Each [activation/ZeroPadding2D ->] DepthwiseConv2D -> norm [-> activation] ->
    linear Conv2D chain as `Recompute(block, tail=conv)`; inside a recompute segment
    too, built inside the segment's block: the segment's second run then keeps each
    one's input only, not its depthwise output and its pointwise input as well."""
    graph, fused = finding.graph, set()
    for node in graph.nodes:
        chain = None if id(node) in fused else separable_chain(graph, node)
        inside = {id(n) for n in chain or ()}
        owners = {finding.segment_of.get(i) for i in inside | {id(node)}}
        if not chain or inside & fused or len(owners) != 1:
            continue
        depthwise = next(n for n in chain if type(n.operation) is keras.layers.DepthwiseConv2D)
        finding.add("separable", (depthwise.operation.name, node.operation.name))
        fused |= inside | {id(node)}
        finding.tails.add(id(node))
        owner = owners.pop()
        blocks = (finding.changes.blocks if owner is None
                  else finding.changes.inner.setdefault(owner, {}))
        blocks[id(node)] = Block(f"{depthwise.operation.name}_recompute", frozenset(inside),
                                 chain[0].input_tensors[0], tail=node)
    finding.taken |= fused
