"""The report itself: every variant measured side by side, accounted and written."""

from tfseg import budget as budget_lib
from tfseg.budget import fit as fit_lib
from tfseg.data.outputs import require_folder
from tfseg.profile.measure import measure_repeats
from tfseg.profile.step import VARIANTS
from tfseg.report import render
from tfseg.report.config import PER_VARIANT, variant_step
from tfseg.report.verify import max_sizes
from tfseg.runtime import device as device_lib


def _common_config(step):
    """The report's "config": the step's settings that all variants share (the run's by
    flag name, the shape and the measurement's own)."""
    return {k: v for k, v in step.record().items()
            if k not in PER_VARIANT + ("memory_saving", "recompute")}


def entry(m):
    """One variant's row of the report, from its `measure_repeats` result `m`."""
    a = m["analysis"]
    kept_total = max(1, a["kept_bytes"])
    by_batch = {int(b): v for b, v in a["estimated_peak_by_batch"].items()}
    per_sample, slope_from = fit_lib.per_sample_slope(m)
    state = a["parameter_bytes"] + a["gradient_bytes"] + a["optimizer_state_bytes"]
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
            # What the step's optimizer holds, as built: one momentum slot per
            # trainable weight, none for SGD without momentum (plus a few scalars).
            "optimizer_slot_bytes": a["optimizer_state_bytes"],
            "activation_bytes": a["kept_bytes"],
            "per_sample_activation_bytes": a["kept_bytes"] // m["batch"],
            "per_sample_peak_bytes": int(per_sample),
            "per_sample_from": slope_from,
            "total_bytes": state + a["kept_bytes"],
        },
        "kept_by_part_bytes": a["kept_by_part"],
        "breakdown_percent": {p: 100.0 * b / kept_total for p, b in a["kept_by_part"].items()},
        "peak_by_part_bytes": a["peak_by_part"],
        "peak_op": a["peak_op"],
        "simulated_threads": a["simulated_threads"],
        "wall_seconds": m["wall_seconds"],
    }


def frontier(config, overhead, log=print):
    """The frontier of training plans (`tfseg.budget`) at the report's size, every plan
    estimated, and the fastest whose estimate fits the budget less `overhead` bytes
    (`--mode=train` would verify it)."""
    budget = int(config.memory_budget_gb * budget_lib.GB)
    points = budget_lib.estimate_frontier(config.step.replace(timed_steps=0), log)
    fitting = [p["name"] for p in points if p["predicted_bytes"] <= budget - overhead]
    return {"budget_bytes": budget, "overhead_bytes": overhead, "points": list(points),
            "fastest_fitting": fitting[0] if fitting else None}


def run(config, log=print):
    """Measures every variant in its own processes and writes the report.

    Args:
      config: a `ReportConfig`.
      log: called with a progress line before each variant (and verification run).

    Returns the report dict; writes report.json, report.md and parts.png to
    `config.out_dir`.
    """
    require_folder(config.out_dir, "--report_dir")  # before minutes of measuring
    report = {"config": _common_config(config.step), "variants": {}}
    measured = {}
    for name in config.variants:
        log(f"measuring {name} ...")
        try:
            measured[name] = measure_repeats(variant_step(config, name), config.repeats)
        except RuntimeError as error:
            if name in VARIANTS:
                raise  # tfseg's own: a bug
            # A tool a user would use instead that does not run this step: the report
            # says so (e.g. keras.RematScope's "full" mode inside a tf.function).
            report.setdefault("failed", {})[name] = str(error)
            continue
        report["variants"][name] = entry(measured[name])
    report["device"] = next(iter(measured.values()))["device"]  # each process's, all the same
    # Measured on a GPU (NVML), 0 on the CPU; needed only to fit the frontier in a budget.
    overhead = device_lib.overhead(config.device_overhead_gb,
                                   required=bool(config.memory_budget_gb and config.frontier))
    report["device_overhead"] = overhead.to_dict()
    stock = report["variants"].get("stock")
    for v in report["variants"].values():
        v["ratio_to_stock"] = (v["measured_peak_bytes"] / stock["measured_peak_bytes"]
                               if stock else None)
    if config.memory_budget_gb:
        report["max_sizes"] = max_sizes(config, measured, log)
        if config.frontier:
            report["frontier"] = frontier(config, overhead.bytes, log)
    render.write(report, config.out_dir)
    return report
