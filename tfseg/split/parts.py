"""The consecutive parts of a functional Keras model, for placing each on a device.

A model split across devices runs its parts one after the other, each on its
device; the tensors that cross a cut are copied to the next device (and their
gradients back). Any cut in a topological order is valid, but a good one copies
little: a *natural cut* is one that only one tensor crosses, besides skip
connections: tensors read more than an eighth of the model later (`SKIP_FRACTION`),
such as DeepLab's stride-4 feature, which the decoder reads, and the image, which
the last resize reads. They are copied once, to where they are read. So the cuts
fall between Xception's units and between the layers of its stem, the ASPP is one
part up to its projection, and so on: never inside a residual unit (its input
crosses as the shortcut) or between parallel branches.
"""

import dataclasses
import math

import tensorflow as tf

from tfseg.memory.graph import Graph

SKIP_FRACTION = 8


@dataclasses.dataclass(frozen=True)
class Part:
    """Consecutive layers of a model that go on one device.

    Args:
      name: the name of its last layer (parts are named by where they end).
      layers: the names of its layers, in the model's topological order.
      weight_bytes: the bytes of its layers' weights.
      trainable_bytes: the bytes of its trainable weights (each has a gradient and
        the optimizer's slots).
    """

    name: str
    layers: tuple
    weight_bytes: int
    trainable_bytes: int


def _size(variable):
    return math.prod(variable.shape) * tf.as_dtype(variable.dtype).size


def parts(model):
    """The model's natural parts (module docstring), in order; each has weights (a
    part without any, e.g. a lone ReLU or the final resize, joins its neighbour)."""
    graph = Graph(model)
    nodes = graph.nodes
    position = {}
    for i, node in enumerate(nodes):
        for tensor in node.outputs:
            position[id(tensor)] = i
    last_use = {}
    for i, node in enumerate(nodes):
        for tensor in node.input_tensors:
            last_use[id(tensor)] = i
    for tensor in model.outputs:
        last_use[id(tensor)] = len(nodes)
    # A tensor still read more than an eighth of the model later is a skip connection.
    reach = max(2, len(nodes) // SKIP_FRACTION)
    skips = {t for t, made in position.items() if last_use.get(t, -1) - made > reach}
    groups, start = [], 0
    for i in range(len(nodes)):
        crossing = {t for t, made in position.items()
                    if made <= i < last_use.get(t, -1) and t not in skips}
        if len(crossing) <= 1 or i == len(nodes) - 1:
            groups.append(nodes[start:i + 1])
            start = i + 1
    return _merge_weightless([_part(group) for group in groups])


def _part(nodes):
    layers = [n.operation for n in nodes]
    weights = [w for layer in layers for w in getattr(layer, "weights", ())]
    trainable = [w for layer in layers for w in getattr(layer, "trainable_weights", ())]
    return Part(layers[-1].name, tuple(layer.name for layer in layers),
                sum(_size(w) for w in weights), sum(_size(w) for w in trainable))


def _merge_weightless(found):
    merged = []
    pending = ()
    for part in found:
        layers = pending + part.layers
        if part.weight_bytes == 0:
            pending = layers
            continue
        merged.append(dataclasses.replace(part, layers=layers))
        pending = ()
    if pending:
        if not merged:  # a model without weights is one part
            return [Part(pending[-1], pending, 0, 0)]
        last = merged.pop()
        merged.append(dataclasses.replace(last, name=pending[-1], layers=last.layers + pending))
    return merged
