"""Largest batch and crop that fit a memory budget, from a measured step.

Training memory is model state + batch x per-sample activations: weights and
optimizer slots are the measured base; gradients
are a fixed part of the step's peak; the rest of the peak scales with the batch,
and at a fixed batch with the number of pixels.
"""

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class Fit:
    """The prediction for one variant under one budget."""

    max_batch: int
    max_square_crop: int
    per_sample_bytes: int
    fixed_bytes: int


def fit(measured, budget_bytes):
    """Fits `measured` (a `tfseg.memory.measure` result with analysis) to a budget.

    The budget covers everything the allocator holds: the measured base
    (weights, optimizer slots) plus the step's peak over it.
    """
    batch, pixels = measured["batch"], measured["height"] * measured["width"]
    gradients = measured["analysis"]["gradient_bytes"]
    fixed = measured["base_bytes"] + gradients
    per_sample = max(1, (measured["peak_over_base_bytes"] - gradients) / batch)
    room = budget_bytes - fixed
    max_batch = max(0, math.floor(room / per_sample))
    per_pixel = per_sample / pixels
    max_crop = max(0, math.floor(math.sqrt(max(room, 0) / per_pixel)))
    return Fit(max_batch, max_crop, int(per_sample), int(fixed))
