"""The memory report: stock Keras vs memory-saving, measured, accounted and planned."""

import dataclasses

from tfseg.profile.measure import VARIANTS, OutOfMemory, StepConfig, measure, measure_repeats
from tfseg.report import planner, render

# Fields of `StepConfig` that differ between the variants of one report.
_PER_VARIANT = ("variant", "recompute_blocks", "analyze", "analyze_batches")


@dataclasses.dataclass(frozen=True)
class ReportConfig:
    """What `run` measures.

    Args:
      step: the configuration of one training step (its per-variant fields,
        `variant`, `recompute_blocks` and `analyze*`, are ignored).
      variants: measured side by side, each in `repeats` fresh processes (the
        median is reported, as the recipe in `tfseg.profile.measure` says).
      recompute_blocks: the backbone blocks the "recompute" variant recomputes
        (None: `tfseg.models.xception.DEFAULT_RECOMPUTE`).
      memory_budget_gb: plan the largest batch and square crop under this budget
        (None: no planner).
      verify_plan: measure the planned sizes for real.
      max_verify_seconds: skip (and record as skipped) a verification run whose
        estimated cost is above this: the variant's own run, its step time scaled
        by the size ratio.
      max_verify_runs: at most this many verification runs per variant.
      out_dir: where report.json, report.md and parts.png go.
    """

    step: StepConfig = StepConfig()
    variants: tuple = VARIANTS
    repeats: int = 3
    recompute_blocks: tuple = None
    memory_budget_gb: float = None
    verify_plan: bool = True
    max_verify_seconds: float = 300.0
    max_verify_runs: int = 6
    out_dir: str = "report"


def _variant(config, name):
    step = config.step
    blocks = config.recompute_blocks if name == "recompute" else ()
    extra = (2 * step.batch,) if config.memory_budget_gb else ()
    return dataclasses.replace(step, variant=name, recompute_blocks=blocks, analyze=True,
                               analyze_batches=extra)


def _common_config(step):
    common = {k: v for k, v in dataclasses.asdict(step).items() if k not in _PER_VARIANT}
    common["crop_size"] = [step.height, step.width]
    return common


def _entry(m):
    a = m["analysis"]
    kept_total = max(1, a["kept_bytes"])
    by_batch = {int(b): v for b, v in a["estimated_peak_by_batch"].items()}
    per_sample, slope_from = planner.per_sample_slope(m)
    return {
        "recompute_blocks": list(m["recompute_blocks"]),
        "measured_peak_bytes": m["peak_over_base_bytes"],
        "measured_peak_max_bytes": m["peak_over_base_max_bytes"],
        "measured_peak_by_process_bytes": m["peak_over_base_by_process"],
        "measured_peak_by_step_bytes": m["peak_over_base_by_step"],
        "base_bytes": m["base_bytes"],
        "step_seconds": m["step_seconds"],
        "static_estimate_bytes": a["estimated_peak_bytes"],
        "estimate_ratio": a["estimated_peak_bytes"] / max(1, m["peak_over_base_bytes"]),
        "static_estimate_by_batch_bytes": by_batch,
        "accounted": {
            "parameter_bytes": a["parameter_bytes"],
            "gradient_bytes": a["gradient_bytes"],
            # momentum SGD: one slot per trainable variable
            "optimizer_slot_bytes": a["gradient_bytes"],
            "activation_bytes": a["kept_bytes"],
            "per_sample_activation_bytes": a["kept_bytes"] // m["batch"],
            "per_sample_peak_bytes": int(per_sample),
            "per_sample_from": slope_from,
            "total_bytes": a["parameter_bytes"] + 2 * a["gradient_bytes"] + a["kept_bytes"],
        },
        "kept_by_part_bytes": a["kept_by_part"],
        "breakdown_percent": {p: 100.0 * b / kept_total for p, b in a["kept_by_part"].items()},
        "peak_by_part_bytes": a["peak_by_part"],
        "peak_op": a["peak_op"],
        "simulated_threads": a["simulated_threads"],
        "wall_seconds": m["wall_seconds"],
    }


def run(config, log=print):
    """Measures every variant in its own process; returns the report dict and writes
    report.json, report.md and parts.png to `config.out_dir`."""
    report = {"config": _common_config(config.step), "variants": {}}
    measured = {}
    for name in config.variants:
        log(f"measuring {name} ...")
        measured[name] = measure_repeats(_variant(config, name), config.repeats)
        report["variants"][name] = _entry(measured[name])
    report["device"] = next(iter(measured.values()))["device"]  # each process's, all the same
    stock = report["variants"].get("stock")
    for v in report["variants"].values():
        v["ratio_to_stock"] = (v["measured_peak_bytes"] / stock["measured_peak_bytes"]
                               if stock else None)
    if config.memory_budget_gb:
        report["plan"] = plan(config, measured, log)
    render.write(report, config.out_dir)
    return report


def estimated_run_seconds(measured, size_ratio):
    """What one verification run (no analysis, the same steps) at `size_ratio` x
    the measured size (batch x pixels) should take: the measured run's fixed cost
    (start-up, build, tracing) plus its steps' time scaled by the size."""
    steps = 2 + measured["timed_steps"]  # warm-up, measured, timed
    fixed = (measured["wall_seconds"] - measured["analysis_seconds"]
             - steps * measured["step_seconds"])
    return max(0.0, fixed) + steps * measured["step_seconds"] * size_ratio


class _Verifier:
    """Measured totals (base + peak) of one variant at other sizes, within a run
    count and a per-run cost cap; runs it will not make are recorded as skipped,
    in `skipped[kind][size]` ({"batch": {5: why}, "crop": {209: why}})."""

    def __init__(self, config, name, measured, log):
        self.config, self.name, self.measured, self.log = config, name, measured, log
        self.runs = 0
        self.skipped = {"batch": {}, "crop": {}}

    def total(self, totals, kind, size, size_ratio, **changes):
        """The total at `size` (a batch or a crop, by `kind`), measured once into
        `totals[size]`; None when the run is skipped."""
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
        self.log(f"verifying {self.name} at {kind} {size} (about {seconds:.0f} s) ...")
        # As many steps as the measured run; the total is from the median step, as
        # the measured peak is. Only running out of memory means "does not fit":
        # any other failure is an error and is raised.
        step = dataclasses.replace(_variant(self.config, self.name), analyze=False,
                                   analyze_batches=(), **changes)
        self.runs += 1
        try:
            m = measure(step)
            totals[size] = m["base_bytes"] + m["peak_over_base_bytes"]
        except OutOfMemory:
            totals[size] = float("inf")
        return totals[size]


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


def plan(config, measured, log=print):
    """Predicts the largest batch and square crop per variant (`planner.fit`); then,
    if `verify_plan`, measures them for real, each run only when its estimated
    cost is under `max_verify_seconds`, at most `max_verify_runs` a variant."""
    budget = int(config.memory_budget_gb * 2**30)
    output_stride = config.step.output_stride
    result = {"budget_gb": config.memory_budget_gb, "budget_bytes": budget,
              "max_verify_seconds": config.max_verify_seconds, "variants": {}}
    for name, m in measured.items():
        f = planner.fit(m, budget, output_stride)
        entry = dataclasses.asdict(f)
        entry["predicted_total_bytes"] = {
            "max_batch": f.total_bytes(f.max_batch),
            "max_batch_plus_one": f.total_bytes(f.max_batch + 1),
            "max_square_crop": f.total_bytes(1, f.max_square_crop**2 / (m["height"] * m["width"])),
        }
        if config.verify_plan:
            verifier = _Verifier(config, name, m, log)
            if f.max_batch >= 1:
                entry["verified"] = _verify_batch(verifier, f, budget)
            if f.max_square_crop >= output_stride:
                entry["crop_verified"] = _verify_crop(verifier, f, budget, output_stride)
            entry["verification_runs"] = verifier.runs
            entry["skipped"] = verifier.skipped
        result["variants"][name] = entry
    return result
