"""Where to cut a split model: per-part costs from the traced step, and the cuts that
balance the predicted per-device peak (checked against every contiguous split)."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import TINY
from tfseg.models import deeplab_v3_plus
from tfseg.split import parts
from tfseg.split import cuts
from tfseg.training.losses import PixelLoss


def _brute_force(costs, count):
    best = None
    for positions in itertools.combinations(range(1, len(costs)), count - 1):
        bounds = (0, *positions, len(costs))
        peak = max(cuts._load("", costs[a:b]).peak for a, b in zip(bounds, bounds[1:]))
        best = peak if best is None else min(best, peak)
    return best


@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_balance_finds_the_smallest_largest_peak(count):
    rng = np.random.default_rng(count)
    for _ in range(20):
        costs = [cuts.PartCost(f"p{i}", *map(int, rng.integers(0, 1000, 3)))
                 for i in range(int(rng.integers(count, 9)))]
        loads = cuts.balance(costs, [f"d{i}" for i in range(count)])
        assert [load.device for load in loads] == [f"d{i}" for i in range(count)]
        assert sum(load.parts for load in loads) == len(costs)
        assert all(load.parts >= 1 for load in loads)
        assert max(load.peak for load in loads) == _brute_force(costs, count)
        assignment = cuts.assignment(loads)
        assert assignment == sorted(assignment, key=lambda d: int(d[1:]))


def test_more_devices_than_parts_is_refused():
    costs = [cuts.PartCost("a", 1, 1, 1), cuts.PartCost("b", 1, 1, 1)]
    with pytest.raises(ValueError, match="3 devices for 2 parts"):
        cuts.balance(costs, ["x", "y", "z"])


def test_part_costs_come_from_the_traced_step():
    model = deeplab_v3_plus(5, **TINY)
    found = parts(model)
    kept = cuts.kept_by_layer(model, tf.TensorSpec((2, 65, 97, 3)),
                              tf.TensorSpec((2, 65, 97), tf.int32), PixelLoss())
    costs = cuts.part_costs(found, kept, slots=1)
    weights = sum(w.numpy().nbytes for w in model.weights)
    trainable = sum(w.numpy().nbytes for w in model.trainable_weights)
    assert sum(c.state for c in costs) == weights + 2 * trainable  # + gradient + momentum
    # Every layer's kept bytes land in its part; the loss's own in the last.
    assert sum(c.kept for c in costs) == sum(sum(sizes) for sizes in kept.values())
    assert kept[""] and costs[-1].kept >= sum(kept[""])
    # The part of the stem's second conv keeps at least that conv's input, the ReLU of
    # the first conv's [2, 33, 49, 8] float32 output (stride 2, width 32 * 0.125).
    by_name = {c.name: c for c in costs}
    assert by_name["entry_conv2"].kept >= 2 * 33 * 49 * 8 * 4
    assert all(c.kept > 0 for c in costs)
    loads = cuts.balance(costs, ["a", "b"])
    one = cuts.balance(costs, ["a"])[0]
    assert max(load.peak for load in loads) < one.peak


def test_describe_redoes_the_article_arithmetic():
    load = cuts.DeviceLoad("GPU:0", "entry_conv1", "logits_resize", 30,
                           state=2 * 2**30, kept=3 * 2**30, working=2**30)
    line, = cuts.describe([load], budget_bytes=11 * 2**30, batch=2)
    assert "= 6,144.0 MiB predicted" in line
    # (11 GiB - 2 GiB of state) / ((3 + 1) GiB / 2 images) = 4.5 images.
    assert line.endswith("a 11 GiB budget fits a batch of 4.5")
