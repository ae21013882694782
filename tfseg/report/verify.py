"""The largest batch and crop per variant under the budget (`tfseg.budget.fit`),
checked by measuring those sizes."""

import dataclasses

from tfseg.budget import fit as fit_lib
from tfseg.profile.measure import OutOfMemory, measure
from tfseg.report.config import variant_step
from tfseg.report.progress import Clock
from tfseg.units import GIB


def estimated_run_seconds(measured, size_ratio):
    """What one verification run (no analysis, the same steps) should take.

    The measured run's fixed cost (start-up, build, tracing) plus its steps' time
    scaled by the size.

    Args:
      measured: a `tfseg.profile.measure` result (with `wall_seconds`).
      size_ratio: the run's size (batch x pixels) over the measured one's.
    """
    steps = 2 + measured["timed_steps"]  # warm-up, measured, timed
    fixed = (measured["wall_seconds"] - measured["analysis_seconds"]
             - steps * measured["step_seconds"])
    return max(0.0, fixed) + steps * measured["step_seconds"] * size_ratio


class _Verifier:
    """Measured totals (base + peak) of one variant at other sizes, within a run
    count and a per-run cost cap; runs it will not make are recorded as skipped,
    in `skipped[kind][size]` ({"batch": {5: why}, "crop": {209: why}}).

    Args:
      config: the `ReportConfig` (its caps and the variant's step).
      name: the variant.
      measured: the variant's measured result at the report's size.
      log: called with a line before each run.
      clock: the report's `tfseg.report.progress.Clock`: no run starts that would end
        past its time bound, nor after a stop request (`Stopped` is raised, and the run
        under way is killed).
    """

    def __init__(self, config, name, measured, log, clock):
        self.config, self.name, self.measured, self.log = config, name, measured, log
        self.clock = clock
        self.runs = 0
        self.skipped = {"batch": {}, "crop": {}}

    def total(self, totals, kind, size, size_ratio, **changes):
        """The total at `size` (a batch or a crop, by `kind`), measured once into
        `totals[size]`; None when the run is skipped. `changes` are the
        `StepConfig` fields of that size."""
        if size in totals:
            return totals[size]
        if size in self.skipped[kind]:
            return None
        seconds = estimated_run_seconds(self.measured, size_ratio)
        if self.runs >= self.config.max_verify_runs:
            self.skipped[kind][size] = {"reason": "run limit",
                                        "estimated_seconds": round(seconds, 1)}
            return None
        if seconds > self.config.max_verify_seconds:
            self.skipped[kind][size] = {"reason": "too expensive",
                                        "estimated_seconds": round(seconds, 1)}
            return None
        if not self.clock.allows(seconds):
            self.skipped[kind][size] = {"reason": "time bound",
                                        "estimated_seconds": round(seconds, 1)}
            return None
        self.log(f"verifying {self.name} at {kind} {size} (about {seconds:.0f} s) ...")
        # As many steps as the measured run; the total is from the median step, as
        # the measured peak is. Only running out of memory means "does not fit":
        # any other failure is an error and is raised.
        step = variant_step(self.config, self.name).replace(analyze=False, analyze_batches=(),
                                                            **changes)
        self.runs += 1
        try:
            m = measure(step, stop=self.clock.stop)
            total = (None if m["peak_over_base_bytes"] is None
                     else m["base_bytes"] + m["peak_over_base_bytes"])
        except OutOfMemory:
            total = float("inf")
        self.clock.done(self.name)
        if total is None:  # the allocator counted too little of the step (tfseg.runtime.peak)
            self.skipped[kind][size] = {"reason": "peak not measurable",
                                        "estimated_seconds": round(seconds, 1)}
            return None
        totals[size] = total
        return total


def _verify_batch(verifier, f, budget):
    """Measures the predicted batch, steps down until one fits, and checks that one
    more does not."""
    m, totals = verifier.measured, {}

    def total(batch):
        return verifier.total(totals, "batch", batch, batch / m["batch"], batch=batch)

    def under_budget(batch):
        return total(batch) is not None and total(batch) <= budget

    batch = f.max_batch
    while batch >= 1 and total(batch) is not None and total(batch) > budget:
        batch -= 1
    while batch >= 1 and total(batch) is not None and under_budget(batch + 1):
        batch += 1
    fits = batch == 0 or (total(batch) is not None and total(batch) <= budget)
    one_more = totals.get(batch + 1)
    return {
        "max_batch": batch if fits else None,
        "total_bytes_by_batch": totals,
        "complete": fits and one_more is not None and one_more > budget,
        "prediction_held": batch == f.max_batch,
    }


def _verify_crop(verifier, f, budget, output_stride):
    """Measures the predicted crop at batch 1 (one run when it fits), stepping down
    by the output stride while it does not."""
    m, totals = verifier.measured, {}
    crop = f.max_square_crop
    while crop >= output_stride:
        ratio = crop * crop / (m["height"] * m["width"] * m["batch"])
        t = verifier.total(totals, "crop", crop, ratio, batch=1, height=crop, width=crop)
        if t is None or t <= budget:
            break
        crop -= output_stride
    fitting = [c for c, v in totals.items() if v <= budget]
    return {
        "max_square_crop": max(fitting) if fitting else None,
        "total_bytes_by_crop": totals,
        "prediction_held": f.max_square_crop in fitting,
    }


def planned_runs(config, f, m):
    """The estimated seconds of the runs that verify fit `f` of measured result `m`
    when its prediction holds: the predicted batch, one more, and the predicted crop
    (those over `max_verify_seconds` left out, at most `max_verify_runs`)."""
    output_stride = config.step.run.model.output_stride
    ratios = []
    if f.max_batch >= 1:
        ratios += [f.max_batch / m["batch"], (f.max_batch + 1) / m["batch"]]
    if f.max_square_crop >= output_stride:
        ratios.append(f.max_square_crop**2 / (m["height"] * m["width"] * m["batch"]))
    seconds = [estimated_run_seconds(m, r) for r in ratios]
    return [s for s in seconds if s <= config.max_verify_seconds][:config.max_verify_runs]


def max_sizes(config, measured, log=print, clock=None):
    """Predicts the largest batch and square crop per variant (`fit_lib.fit`); then,
    if `verify_sizes`, measures them for real, each run only when its estimated
    cost is under `max_verify_seconds`, at most `max_verify_runs` a variant, and
    only while the `clock`'s time bound allows it.

    Args:
      config: the `ReportConfig` (`memory_budget_gb` set).
      measured: {variant: its `tfseg.profile.measure.measure_repeats` result}.
      log: called with the plan, a line before each verification run and the progress.
      clock: a `tfseg.report.progress.Clock` (None: one without a bound or a stop).

    Returns the report's "max_sizes" dict; each variant's "sizes_measured" says whether
    its largest batch and crop were measured (false: the predictions are estimates).
    Raises `tfseg.profile.measure.Stopped` on a stop request (the run under way killed).
    """
    clock = clock or Clock(log=log)
    budget = int(config.memory_budget_gb * GIB)
    output_stride = config.step.run.model.output_stride
    result = {"budget_gb": config.memory_budget_gb, "budget_bytes": budget,
              "max_verify_seconds": config.max_verify_seconds, "variants": {}}
    fits = {name: fit_lib.fit(m, budget, output_stride) for name, m in measured.items()}
    if config.verify_sizes:
        clock.plan("verifying the largest batch and crop under the budget",
                   {name: planned_runs(config, f, measured[name]) for name, f in fits.items()})
    for name, m in measured.items():
        f = fits[name]
        entry = dataclasses.asdict(f)
        entry["predicted_total_bytes"] = {
            "max_batch": f.total_bytes(f.max_batch),
            "max_batch_plus_one": f.total_bytes(f.max_batch + 1),
            "max_square_crop": f.total_bytes(1, f.max_square_crop**2 / (m["height"] * m["width"])),
        }
        entry["sizes_measured"] = False
        if config.verify_sizes:
            verifier = _Verifier(config, name, m, log, clock)
            if f.max_batch >= 1:
                entry["verified"] = _verify_batch(verifier, f, budget)
            if f.max_square_crop >= output_stride:
                entry["crop_verified"] = _verify_crop(verifier, f, budget, output_stride)
            entry["verification_runs"] = verifier.runs
            entry["skipped"] = verifier.skipped
            entry["sizes_measured"] = not any(verifier.skipped.values())
            clock.finish(name)
        result["variants"][name] = entry
    if clock.bound_reached:
        result["time_bound_reached"] = True
    return result
