"""The report itself: every variant measured side by side, accounted and written."""

import dataclasses

from tfseg import budget as budget_lib
from tfseg.budget import fit as fit_lib
from tfseg.io.outputs import require_writable
from tfseg.profile.measure import Stopped, measure_repeats
from tfseg.profile.step import VARIANTS
from tfseg.report import render
from tfseg.report.config import PER_VARIANT, variant_step
from tfseg.report.progress import Clock, duration
from tfseg.report.verify import max_sizes
from tfseg.runtime import device as device_lib
from tfseg.units import GIB


def _common_config(step):
    """The report's "config": the step's settings that all variants share (the run's by
    flag name, the shape and the measurement's own)."""
    return {k: v for k, v in step.record().items()
            if k not in PER_VARIANT + ("memory_saving", "recompute")}


def _ratio(over, under):
    """``over / under``, None where either is unknown (None)."""
    return None if over is None or under is None else over / under


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
        # None where the peak is unknown (`tfseg.runtime.peak`): a ratio of it is too.
        "estimate_ratio": _ratio(a["estimated_peak_bytes"], m["peak_over_base_bytes"]),
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
        # Weights, optimizer slots and gradients beside the parts, and the subtotals
        # (the backbone's flows) the tables add (`tfseg.profile.analysis`).
        "held_at_peak_bytes": a["held_at_peak"],
        "rollup": a["rollup"],
        "peak_by_kind_bytes": a["peak_by_kind"],
        "peak_op": a["peak_op"],
        "simulated_threads": a["simulated_threads"],
        "wall_seconds": m["wall_seconds"],
        # What the step costs the host (`tfseg.profile.launches`): None where not counted.
        "jit_mode": m.get("jit_mode"),
        "ops_per_step": m.get("ops_per_step"),
        "async_ops_per_step": m.get("async_ops_per_step"),
        "compile_seconds": m.get("compile_seconds"),
        "time_by_block": m.get("time_by_block") or {},
    }


def frontier(config, overhead, log=print, stop=None):
    """The frontier of training plans (`tfseg.budget`) at the report's size, every plan
    estimated, and the fastest whose estimate fits the budget less `overhead` bytes
    (`--mode=train` would verify it)."""
    budget = int(config.memory_budget_gb * GIB)
    points = budget_lib.estimate_frontier(config.step.replace(timed_steps=0), log, stop=stop)
    fitting = [p["name"] for p in points if p["predicted_bytes"] <= budget - overhead]
    return {"budget_bytes": budget, "overhead_bytes": overhead, "points": list(points),
            "fastest_fitting": fitting[0] if fitting else None}


def intent(config):
    """The line a report starts with: what it is about to measure, and its bound."""
    processes = "process" if config.repeats == 1 else "processes"
    variants = "variant" if len(config.variants) == 1 else "variants"
    line = (f"report: {len(config.variants)} {variants} ({', '.join(config.variants)}), "
            f"{config.repeats} fresh {processes} each")
    if config.memory_budget_gb:
        line += f"; then for the {config.memory_budget_gb:g} GiB budget"
        if config.frontier:
            line += ", the training plans estimated"
        if config.verify_sizes:
            line += ", the largest batch and crop measured"
    if config.max_minutes:
        line += f"; bounded at {config.max_minutes:g} min (then estimates only)"
    return line


def _measure_variants(config, report, measured, clock, log):
    """Measures each variant into `measured` and its row into `report`, with a progress
    line after each."""
    for k, name in enumerate(config.variants):
        clock.check()
        log(f"measuring {name} ...")
        try:
            measured[name] = measure_repeats(variant_step(config, name), config.repeats,
                                             stop=clock.stop)
        except RuntimeError as error:
            if name in VARIANTS:
                raise  # tfseg's own: a bug
            # A tool a user would use instead that does not run this step: the report
            # says so (e.g. keras.RematScope's "full" mode inside a tf.function).
            report.setdefault("failed", {})[name] = str(error)
            continue
        report["variants"][name] = entry(measured[name])
        left = len(config.variants) - k - 1
        rest = f", about {duration(clock.elapsed() / (k + 1) * left)} left of them" if left else ""
        log(f"{k + 1}/{len(config.variants)} variants measured{rest}")


def _search(config, report, measured, overhead, clock, log):
    """The budget's part of `report`: the frontier's static estimates first (each a
    traced step, never run), then the measurements that check the largest sizes, as
    far as the time bound allows. Stopped, or stopped before (`report["partial"]`), it
    keeps the sizes' predictions, from what was measured (no process runs)."""
    if "partial" not in report:
        try:
            if config.frontier:
                report["frontier"] = frontier(config, overhead.bytes, log, clock.stop)
            report["max_sizes"] = max_sizes(config, measured, log, clock)
            return
        except Stopped:
            report["partial"] = {"signal": clock.stop.signal, "missing": []}
    if config.frontier and "frontier" not in report:
        report["partial"]["missing"].append("frontier")
    report["partial"]["missing"].append("size verification")
    report["max_sizes"] = max_sizes(dataclasses.replace(config, verify_sizes=False), measured,
                                    log)


def run(config, log=print, stop=None):
    """Measures every variant in its own processes and writes the report.

    Args:
      config: a `ReportConfig`.
      log: called with what the report will do, a progress line before and after each
        variant (and verification run).
      stop: a `tfseg.runtime.signals.StopRequest` (or None): once set, the measurement
        under way is killed, and what was measured is written, marked partial (nothing
        is, before the first variant is measured: `Stopped` is raised).

    Returns the report dict; writes report.json, report.md, parts.png and parts_stacked.png to
    `config.out_dir`. A report stopped early has "partial": {"signal": ..., "missing":
    [what it did not get to]}; with a budget, "time_bound_reached" says whether the
    time bound left sizes unmeasured (their rows have "sizes_measured": false).
    """
    require_writable(config.out_dir, "--report_dir")  # before minutes of measuring
    clock = Clock(config.max_minutes, stop, log)
    report = {"config": _common_config(config.step), "variants": {}}
    measured = {}
    log(intent(config))
    try:
        _measure_variants(config, report, measured, clock, log)
    except Stopped:
        if not measured:
            raise
        left = [n for n in config.variants if n not in measured and n not in
                report.get("failed", {})]
        report["partial"] = {"signal": stop.signal, "missing": [f"variant {n}" for n in left]}
    report["device"] = next(iter(measured.values()))["device"]  # each process's, all the same
    # Measured on a GPU (NVML), 0 on the CPU; needed only to fit the frontier in a budget.
    overhead = device_lib.overhead(config.device_overhead_gb,
                                   required=bool(config.memory_budget_gb and config.frontier))
    report["device_overhead"] = overhead.to_dict()
    stock = report["variants"].get("stock")
    for v in report["variants"].values():
        v["ratio_to_stock"] = (_ratio(v["measured_peak_bytes"], stock["measured_peak_bytes"])
                               if stock else None)
    if config.memory_budget_gb:
        _search(config, report, measured, overhead, clock, log)
        report["time_bound_reached"] = clock.bound_reached
    render.write(report, config.out_dir)
    return report
