"""How a node the rules planned is built in the rewritten model.

Each plan is `build(builder, node, tensors)`: `tensors` maps id(old tensor) to its new
one, `builder` is the rewrite's (`tfseg.memory.rewrite`: `twin(layer)`, `made(layer,
cls, extra)`, `block(block, node)`, `call(node, tensors)`); it returns the node's new
outputs, or None where another node makes them.
"""

import dataclasses

from tfseg.layers import ResizedConcatConv2D
from tfseg.memory.inside import rebuilt_with_twins


class Passes:
    """A layer the next one takes in (an activation, a zero padding, a resize): its
    output is its input, which the twin reading it transforms itself."""

    def build(self, builder, node, tensors):
        return tensors[id(node.input_tensors[0])]


class Drops:
    """A layer another node's plan builds (a norm folded into its Add, a channel scale
    folded into its conv)."""

    def build(self, builder, node, tensors):
        return None


PASSES, DROPS = Passes(), Drops()


@dataclasses.dataclass(frozen=True, eq=False)  # plans hold KerasTensors: compared by identity
class Block:
    """The nodes `inside` (ids), from `start` (a tensor, or a tuple of tensors: the
    block's inputs) to the node it is keyed by, as one `Recompute` layer called `name`:
    a recompute segment (`tail` None; with `branches`, a list of the node ids of each
    branch, as `SerialBranches`), or a separable conv whose pointwise conv is the node
    `tail` (`tail_relu`: the last node inside is a plain ReLU, which `Recompute`
    applies itself; `chunks`: its backward pass a k-th of its channels at a time)."""

    name: str
    inside: frozenset
    start: object
    tail: object = None
    branches: list = None
    tail_relu: bool = False
    chunks: int = 1  # `Recompute(chunks=...)`: a tail block's backward pass in chunks

    def build(self, builder, node, tensors):
        starts = [tensors[id(t)] for t in self.starts]
        return builder.block(self, node)(starts if isinstance(self.start, tuple) else starts[0])

    @property
    def starts(self):
        """The block's input tensors, as a tuple."""
        return self.start if isinstance(self.start, tuple) else (self.start,)


@dataclasses.dataclass(frozen=True, eq=False)
class Scaled:
    """A conv that multiplies its input `full` by `scale` itself (squeeze-and-excitation)."""

    full: object
    scale: object

    def build(self, builder, node, tensors):
        return builder.twin(node.operation)(tensors[id(self.full)], scale=tensors[id(self.scale)])


@dataclasses.dataclass(frozen=True, eq=False)
class FoldedNorm:
    """An Add whose norm input (the node `norm`) adds the `other` input itself (and
    relu(other) with `relu`)."""

    norm: object
    other: object
    relu: bool = False

    def build(self, builder, node, tensors):
        args, kwargs = self.norm.arguments.fill_in(tensors)
        extra = {"residual_relu": True} if self.relu else {}
        return builder.twin(self.norm.operation)(*args, residual=tensors[id(self.other)],
                                                 **extra, **kwargs)


@dataclasses.dataclass(frozen=True, eq=False)
class ConcatConv:
    """A Concatenate of resized maps that the 1x1 conv `conv` starting a nested model
    takes in (`ResizedConcatConv2D`, `input_sizes` as `sizes`)."""

    conv: object
    sizes: list

    def build(self, builder, node, tensors):
        conv = builder.made(self.conv, ResizedConcatConv2D, {"input_sizes": self.sizes})
        return conv([tensors[id(t)] for t in node.input_tensors])


@dataclasses.dataclass(frozen=True, eq=False)
class Parts:
    """A reader of the `Concatenate` node `concat` whose twin takes the concatenation's
    parts (`input_parts`) instead of it: the ReLUs before it pass their inputs."""

    concat: object

    def build(self, builder, node, tensors):
        return builder.twin(node.operation)([tensors[id(t)] for t in self.concat.input_tensors])


@dataclasses.dataclass(frozen=True, eq=False)
class Rebuilt:
    """A subclassed layer called as a copy of it rebuilt with `twins` inside
    (`tfseg.memory.inside`), or as itself where no copy rebuilds it."""

    twins: list

    def build(self, builder, node, tensors):
        layer = node.operation
        if layer not in builder.new_layers:
            args, kwargs = node.arguments.fill_in(tensors)
            copy, outputs = rebuilt_with_twins(layer, self.twins, args, kwargs)
            if copy is not None:
                builder.new_layers[layer] = copy
                return outputs
        return builder.call(node, tensors)
