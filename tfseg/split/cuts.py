"""Where to cut a model split across devices: the cuts that balance the predicted
per-device peak, and that prediction printed as the article's arithmetic is.

A device's predicted peak is the sum over its parts (`tfseg.split.parts`) of

  * the weights, their gradients and the optimizer's slots (`slots` per weight:
    one for SGD with momentum, two for Adam);
  * the activations the backward pass keeps, from the traced (never run) step of
    the unsplit model (`tfseg.memory.kept`), attributed to layers;

plus the backward pass's working set, taken as twice the part's largest kept tensor
(its gradient and its input's gradient are alive at once), the largest over its
parts. Among contiguous assignments of parts to devices (each device at least one
part, in order), the one with the smallest largest peak is chosen, by dynamic
programming over the cut positions.
"""

import dataclasses

import tensorflow as tf

from tfseg import keras_graph
from tfseg.memory.kept import kept_tensors
from tfseg.units import GIB, MIB


@dataclasses.dataclass(frozen=True)
class PartCost:
    """A part's predicted bytes: `state` (weights, gradients, optimizer slots), `kept`
    (activations kept for the backward pass) and `working` (its backward working set)."""

    name: str
    state: int
    kept: int
    working: int


@dataclasses.dataclass(frozen=True)
class DeviceLoad:
    """What a device holds under a split: its parts (first and last by name, count) and
    the predicted bytes (`PartCost`'s fields summed; `working` is the largest)."""

    device: str
    first: str
    last: str
    parts: int
    state: int
    kept: int
    working: int

    @property
    def peak(self):
        return self.state + self.kept + self.working


def kept_by_layer(model, images, labels, loss_fn):
    """{layer name: bytes} that a training step of `model` keeps for its backward pass,
    by the model's own (top-level) layers ("": the loss's); traced for `images` and
    `labels` (tensor specs or tensors), never run."""

    @tf.function(autograph=False)
    def gradients(images, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        return [loss] + tape.gradient(loss, model.trainable_variables)

    graph = gradients.get_concrete_function(images, labels).graph
    top = {inner.name: layer.name for layer in model.layers for inner in keras_graph.sublayers(layer, include_self=True)}
    by_layer = {}
    for item in kept_tensors(graph, graph.outputs[0], set(top)):
        by_layer.setdefault(top.get(item.layer, ""), []).append(item.bytes)
    return by_layer


def part_costs(parts, kept, slots):
    """`PartCost`s of `parts` from `kept_by_layer`'s `kept` and `slots` optimizer slots
    per trainable weight."""
    costs = []
    for k, part in enumerate(parts):
        sizes = [size for name in part.layers for size in kept.get(name, ())]
        if k == len(parts) - 1:  # the loss's, which runs on the last part's device
            sizes += kept.get("", [])
        costs.append(PartCost(part.name, part.weight_bytes + part.trainable_bytes * (1 + slots),
                              sum(sizes), 2 * max(sizes, default=0)))
    return costs


def _load(device, costs):
    return DeviceLoad(device, costs[0].name, costs[-1].name, len(costs),
                      sum(c.state for c in costs), sum(c.kept for c in costs),
                      max(c.working for c in costs))


def balance(costs, devices):
    """The `DeviceLoad`s of the contiguous split of `costs` (`PartCost`s, in order)
    over `devices` whose largest predicted peak is the smallest."""
    n, k = len(costs), len(devices)
    if k > n:
        raise ValueError(f"{k} devices for {n} parts: give at most {n}")
    # best[j][i]: the smallest largest peak of the first i parts on the first j devices.
    peak = {}

    def span(a, b):
        if (a, b) not in peak:
            peak[a, b] = _load("", costs[a:b]).peak
        return peak[a, b]

    infinity = float("inf")
    best = [[infinity] * (n + 1) for _ in range(k + 1)]
    choice = [[0] * (n + 1) for _ in range(k + 1)]
    best[0][0] = 0
    for j in range(1, k + 1):
        for i in range(j, n - (k - j) + 1):
            for start in range(j - 1, i):
                value = max(best[j - 1][start], span(start, i))
                if value < best[j][i]:
                    best[j][i], choice[j][i] = value, start
    ends, i = [], n
    for j in range(k, 0, -1):
        ends.append((choice[j][i], i))
        i = choice[j][i]
    return [_load(device, costs[a:b]) for device, (a, b) in zip(devices, reversed(ends))]


def assignment(loads):
    """The device of each part, in order, from `balance`'s loads."""
    return [load.device for load in loads for _ in range(load.parts)]


def describe(loads, budget_bytes=0, batch=1):
    """Lines that print the prediction, one per device, as the article's arithmetic:
    state + kept activations + working set = peak; with a budget, the batch that
    fits, (budget - state - working) / (kept per image)."""
    lines = []
    for load in loads:
        line = (f"{load.device}: {load.parts} parts ({load.first} .. {load.last}): "
                f"weights+grads+slots {load.state / MIB:,.1f} MiB + kept activations "
                f"{load.kept / MIB:,.1f} MiB + backward working set {load.working / MIB:,.1f} MiB"
                f" = {load.peak / MIB:,.1f} MiB predicted")
        if budget_bytes and load.kept:
            per_image = (load.kept + load.working) / batch
            fits = (budget_bytes - load.state) / per_image
            line += f"; a {budget_bytes / GIB:g} GiB budget fits a batch of {fits:.1f}"
        lines.append(line)
    return lines
