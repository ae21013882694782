"""Largest batch and crop that fit a memory budget, from a measured step.

Training memory is model state + batch x per-sample memory. The state (weights,
optimizer slots) is the measured base. The per-sample slope is the static
analysis's: the peak it estimates at the measured batch and at a second batch
(the step traced for it, not run), so gradients, update temporaries and any
other part of the peak that does not grow with the batch drop out of it. The
measured peak then fixes the level: at batch B the step needs

    base + measured_peak + (B - measured_batch) x per_sample

At batch 1 the per-sample part grows with the number of pixels, which gives the
largest square crop; it is rounded down to a size the crop rule allows (a
multiple of the output stride, or one more).
"""

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class Fit:
    """The prediction for one variant under one budget.

    `slope_from`: "analysis" (two static estimates) or "measured" (the measured
    peak over the batch: the whole peak taken as per-sample, an upper bound on the
    slope, when the analysis has only one batch), "estimate" (the same with the
    static estimate, where the allocator could not measure the peak).
    """

    max_batch: int
    max_square_crop: int
    per_sample_bytes: int
    fixed_bytes: int
    slope_from: str

    def total_bytes(self, batch=1, pixels_ratio=1.0):
        """Predicted allocator total at `batch` (and crop area x `pixels_ratio`)."""
        return int(self.fixed_bytes + batch * pixels_ratio * self.per_sample_bytes)


def valid_crop(size, output_stride):
    """The largest crop <= `size` that is a multiple of `output_stride` or one
    more (0 when none is)."""
    multiple = size // output_stride * output_stride
    if multiple < output_stride:
        return 0
    return multiple + 1 if multiple + 1 <= size else multiple


def per_sample_slope(measured):
    """(bytes per sample, source) from the analysis's peak estimates at two batches,
    else the measured peak over the batch."""
    analysis = measured.get("analysis") or {}
    by_batch = {int(b): v for b, v in (analysis.get("estimated_peak_by_batch") or {}).items()}
    if len(by_batch) >= 2:
        low, high = sorted(by_batch)[0], sorted(by_batch)[-1]
        slope = (by_batch[high] - by_batch[low]) / (high - low)
        if slope > 0:
            return slope, "analysis"
    peak, source = level(measured)
    return peak / measured["batch"], source


def level(measured):
    """(the step's peak over its base, "measured"), or where the allocator could not
    measure it (None: `tfseg.runtime.peak`) (the analysis's static estimate, "estimate")."""
    if measured["peak_over_base_bytes"] is not None:
        return measured["peak_over_base_bytes"], "measured"
    return measured["analysis"]["estimated_peak_bytes"], "estimate"


def fit(measured, budget_bytes, output_stride=None):
    """Fits `measured` (a `tfseg.profile.measure` result) to a budget.

    The budget covers everything the allocator holds: the measured base
    (weights, optimizer slots, inputs) plus the step's peak over it (its static
    estimate where the allocator could not measure it).
    """
    batch, pixels = measured["batch"], measured["height"] * measured["width"]
    output_stride = output_stride or measured.get("output_stride", 16)
    per_sample, source = per_sample_slope(measured)
    per_sample = max(1.0, per_sample)
    base = measured["base_bytes"]
    fixed = max(base, base + level(measured)[0] - batch * per_sample)
    room = budget_bytes - fixed
    max_batch = max(0, math.floor(room / per_sample))
    per_pixel = per_sample / pixels
    crop = math.floor(math.sqrt(max(room, 0) / per_pixel))
    return Fit(max_batch, valid_crop(crop, output_stride), int(per_sample), int(fixed), source)
