"""The rules that make blocks of nodes: recompute segments and fused separable convs."""

import keras

from tfseg.layers import ResizeLike, elementwise
from tfseg.layers.recompute import is_linear_depthwise
from tfseg.memory.matchers import relu_start, separable_chain
from tfseg.memory.plans import Block
from tfseg.memory.rules import record, rule
from tfseg.memory.segments import branch_nodes, producer, segment_nodes

# Cheap, deterministic and without weights: a block can run them again.
RESIZES = (ResizeLike, keras.layers.UpSampling2D, keras.layers.Resizing)

record("recomputed", lambda names: f"recomputing {len(names)} blocks ({', '.join(names)})")
record("separable", lambda pairs: f"fused {len(pairs)} separable convs")
record("resized_concat", lambda names: f"{len(names)} of them take in the resized "
                                       f"concatenation before them ({', '.join(names)})")
record("chunked", lambda names: f"{len(names)} of them run their backward passes in chunks "
                                f"of channels ({', '.join(names)})")


def _chunks(finding, depthwise):
    """The chunks `RewriteOptions.chunked` gives the separable conv of `depthwise` (1:
    none), recorded."""
    chunks = dict(finding.options.chunked).get(depthwise.operation.name)
    if chunks is None:
        return 1
    finding.add("chunked", depthwise.operation.name)  # named: found, whatever its chunks
    return chunks


@rule("recompute_segments")
def recompute_segments(finding):
    """Each `recompute` segment as a `Block`; where a plain ReLU only the segment reads
    makes its input, the segment starts before it (`relu_start`)."""
    graph = finding.graph
    for segment in finding.recompute:
        inside, start, end = segment_nodes(graph, segment)
        relu = relu_start(graph, start, inside | finding.taken)
        if relu is not None:  # the block keeps the norm's output, kept anyway
            inside, start = inside | {id(relu)}, relu.input_tensors[0]
        if inside & finding.taken:
            raise ValueError(f"recompute segment {segment.name!r} overlaps another")
        branches = None
        if segment.branches:
            shared = set() if relu is None else {id(relu)}
            branches = branch_nodes(segment, inside, start, end, shared)
        finding.claim(end, block=Block(segment.name, frozenset(inside), start,
                                       branches=branches),
                      record=("recomputed", segment.name))


@rule("separable", option="fuse_separable")
def separable(finding):
    """Each [activation/ZeroPadding2D ->] DepthwiseConv2D -> norm [-> activation] ->
    linear Conv2D chain as `Recompute(block, tail=conv)`; inside a recompute segment
    too, built inside the segment's block: the segment's second run then keeps each
    one's input only, not its depthwise output and its pointwise input as well."""
    graph, fused = finding.graph, set()
    for node in graph.nodes:
        taken = id(node) in fused or id(node) in finding.tails  # an earlier rule's block
        chain = None if taken else separable_chain(graph, node)
        inside = {id(n) for n in chain or ()}
        owners = {finding.segment_of.get(i) for i in inside | {id(node)}}
        if not chain or inside & fused or len(owners) != 1:
            continue
        depthwise = next(n for n in chain if type(n.operation) is keras.layers.DepthwiseConv2D)
        fused |= inside | {id(node)}
        block = Block(f"{depthwise.operation.name}_recompute", frozenset(inside),
                      chain[0].input_tensors[0], tail=node, tail_relu=relu_last(chain),
                      chunks=_chunks(finding, depthwise))
        finding.claim(node, block=block, within=owners.pop(),
                      record=("separable", (depthwise.operation.name, node.operation.name)))


@rule("resized_concat_separable", option="lean_upsampling")
def resized_concat_separable(finding):
    """A separable conv (as `separable`'s) whose depthwise reads a `Concatenate` of
    resized maps (DeepLabv3+'s decoder: the ASPP output upsampled by 4 beside the
    low-level projection): the `Recompute` block starts before the resizes and the
    concatenation, so it keeps the maps before them, not the large concatenation."""
    graph = finding.graph
    if not finding.options.fuse_separable:  # it is a fused separable conv as well
        return
    for node in finding.open_nodes():
        chain = None if id(node) in finding.segment_of else separable_chain(graph, node)
        # The depthwise conv first (no activation or padding before it), a tail
        # `Recompute` can run from its backprop kernels: else the plain `separable`.
        found = (chain and type(chain[0].operation) is keras.layers.DepthwiseConv2D
                 and is_linear_depthwise(chain[0].operation) and resized_concat(graph, chain[0]))
        if not found:
            continue
        before, starts = found
        inside = frozenset({id(n) for n in chain} | before)
        if inside & finding.taken:
            continue
        depthwise = chain[0]
        finding.add("resized_concat", depthwise.operation.name)
        name = f"{depthwise.operation.name}_recompute"
        block = Block(name, inside, starts, tail=node, tail_relu=relu_last(chain),
                      chunks=_chunks(finding, depthwise))
        finding.claim(node, block=block,
                      record=("separable", (depthwise.operation.name, node.operation.name)))
        # Inside it, the depthwise conv keeps the maps too, not the concatenation:
        # its gradients rebuild it, so the block's second run never holds it beside
        # the norm's backward pass.
        finding.claim(depthwise, within=name, block=Block(
            f"{depthwise.operation.name}_input", frozenset(before), starts, tail=depthwise))


def relu_last(chain):
    """Whether a separable chain ends in a plain ReLU (norm -> ReLU -> pointwise)."""
    return len(chain) > 2 and elementwise.is_plain_relu(chain[-1].operation)


def resized_concat(graph, first):
    """(node ids, input tensors) of what a block can run again before `first`: the
    `Concatenate` only it reads, the resizes (`RESIZES`) only that reads, at least one,
    and a plain ReLU those alone read; else None."""
    concat = graph.sole_feeder(first)
    if concat is None or type(concat.operation) is not keras.layers.Concatenate:
        return None
    resizes = [producer(t) for t in concat.input_tensors]
    resizes = [n for n in resizes if not n.is_input and type(n.operation) in RESIZES
               and graph.only_consumer(n) is concat and not graph.shared(n.operation)]
    if not resizes or graph.shared(concat.operation):
        return None
    inside = {id(concat)} | {id(n) for n in resizes}
    for node in [concat, *resizes]:
        for tensor in node.input_tensors:
            relu = relu_start(graph, tensor, inside)
            if relu is not None:  # keep its input, a norm's output kept anyway
                inside.add(id(relu))
    starts = []
    for node in graph.nodes:
        if id(node) in inside:
            starts += [t for t in node.input_tensors
                       if id(producer(t)) not in inside and all(t is not s for s in starts)]
    return inside, tuple(starts)
