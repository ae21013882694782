"""Segments of a functional Keras model: blocks to recompute, and parallel branches."""

import dataclasses

import keras

from tfseg import keras_graph


@dataclasses.dataclass(frozen=True)
class Segment:
    """A block to recompute: every layer after `start` up to and including `end`.

    `start` is the layer whose output is the block's only input; `end` makes its
    only output. No tensor inside the block may be used outside it.

    `branches`: `end` is a `Concatenate` of branches that each read only the
    block's input; they run again one at a time in the backward pass
    (`tfseg.layers.SerialBranches`), not all at once.
    """

    name: str
    start: str
    end: str
    branches: bool = False


def producer(tensor):
    """The node that makes a symbolic Keras tensor."""
    return keras_graph.producing_node(tensor)


def segment_nodes(graph, segment):
    """The nodes of a `Segment`, its input tensor and its last node; checks it is cut off."""
    start = graph.node_of(segment.start).outputs[0]
    last = graph.node_of(segment.end)
    end = last.operation
    # Walk back from the end to the start tensor.
    inside, stack = set(), [last]
    while stack:
        node = stack.pop()
        if id(node) in inside:
            continue
        inside.add(id(node))
        for tensor in node.input_tensors:
            if tensor is start:
                continue
            parent = producer(tensor)
            if parent.is_input:
                raise ValueError(
                    f"recompute segment {segment.name!r}: {segment.start!r} does not cut it off")
            stack.append(parent)
    for node in graph.nodes:
        if id(node) in inside and node.operation is not end:
            for tensor in node.outputs:
                used = graph.consumers[id(tensor)]
                if id(tensor) in graph.outputs or any(id(user) not in inside for user in used):
                    raise ValueError(f"recompute segment {segment.name!r}: "
                                     f"{node.operation.name!r} is used outside it")
    return inside, start, last


def branch_nodes(segment, inside, start, end, shared=frozenset()):
    """[node ids of each input's branch] of a branches segment, which must not share
    nodes but those in `shared` (a prefix each branch runs for itself, e.g. a ReLU)."""
    if type(end.operation) is not keras.layers.Concatenate:
        raise ValueError(f"segment {segment.name!r}: {segment.end!r} is not a Concatenate")
    branches, seen = [], set()
    for tensor in end.input_tensors:
        nodes, stack = set(), [] if tensor is start else [tensor]
        while stack:
            node = producer(stack.pop())
            if id(node) not in nodes:
                nodes.add(id(node))
                stack += [t for t in node.input_tensors if t is not start]
        if (nodes - shared) & seen or not nodes <= inside:
            raise ValueError(f"segment {segment.name!r}: its branches share layers")
        seen |= nodes - shared
        branches.append(nodes)
    return branches
