"""The memory report: stock Keras vs memory-saving, measured, accounted and planned."""

import dataclasses

from tfseg.memory.measure import StepConfig, measure
from tfseg.report import planner, render

FULL_RECOMPUTE = ("entry_block1", "entry_block3", "middle", "exit_block1", "exit_block2")


@dataclasses.dataclass(frozen=True)
class ReportConfig:
    """What `run` measures. `step` is the configuration of one training step (its
    `variant` is ignored); `variants` are measured side by side."""

    step: StepConfig = StepConfig()
    variants: tuple = ("stock", "memory_saving", "recompute")
    memory_budget_gb: float = None
    verify_plan: bool = True
    out_dir: str = "report"


def _variant(config, name):
    blocks = FULL_RECOMPUTE if name == "recompute" else ()
    return dataclasses.replace(config.step, variant=name, recompute_blocks=blocks, analyze=True)


def run(config, log=print):
    """Measures every variant in its own process; returns the report dict and writes
    report.json, report.md and parts.png to `config.out_dir`."""
    report = {"config": dataclasses.asdict(config.step), "variants": {}}
    for name in config.variants:
        log(f"measuring {name} ...")
        m = measure(_variant(config, name))
        a = m["analysis"]
        kept_total = max(1, a["kept_bytes"])
        report["variants"][name] = {
            "measured_peak_bytes": m["peak_over_base_bytes"],
            "base_bytes": m["base_bytes"],
            "step_seconds": m["step_seconds"],
            "static_estimate_bytes": a["estimated_peak_bytes"],
            "accounted": {
                "parameter_bytes": a["parameter_bytes"],
                "gradient_bytes": a["gradient_bytes"],
                # momentum SGD: one slot per trainable variable
                "optimizer_slot_bytes": a["gradient_bytes"],
                "activation_bytes": a["kept_bytes"],
                "per_sample_activation_bytes": a["kept_bytes"] // m["batch"],
                "total_bytes": a["parameter_bytes"] + 2 * a["gradient_bytes"] + a["kept_bytes"],
            },
            "kept_by_part_bytes": a["kept_by_part"],
            "breakdown_percent": {p: 100.0 * b / kept_total for p, b in a["kept_by_part"].items()},
            "_measured": m,
        }
    stock = report["variants"].get("stock")
    for v in report["variants"].values():
        v["ratio_to_stock"] = v["measured_peak_bytes"] / stock["measured_peak_bytes"] if stock else None
    if config.memory_budget_gb:
        report["plan"] = plan(config, report, log)
    for v in report["variants"].values():
        del v["_measured"]
    render.write(report, config.out_dir)
    return report


def plan(config, report, log=print, max_runs=6):
    """Predicts the largest batch and square crop per variant from the measured slope;
    then, if `verify_plan`, measures the predicted batch, steps down until a batch fits
    and checks that one more does not (at most `max_runs` measurements a variant)."""
    budget = int(config.memory_budget_gb * 2**30)
    result = {"budget_gb": config.memory_budget_gb, "variants": {}}
    for name, v in report["variants"].items():
        f = planner.fit(v["_measured"], budget)
        entry = dataclasses.asdict(f)
        if config.verify_plan and f.max_batch >= 1:
            totals = {}

            def total(batch):
                if batch not in totals and len(totals) < max_runs:
                    log(f"verifying {name} at batch {batch} ...")
                    step = dataclasses.replace(
                        _variant(config, name), batch=batch, timed_steps=0, analyze=False
                    )
                    try:
                        m = measure(step)
                        totals[batch] = m["base_bytes"] + m["peak_over_base_bytes"]
                    except RuntimeError:  # out of memory on a device: does not fit
                        totals[batch] = float("inf")
                return totals.get(batch)

            batch = f.max_batch
            while batch >= 1 and total(batch) is not None and total(batch) > budget:
                batch -= 1
            while total(batch + 1) is not None and total(batch + 1) <= budget:
                batch += 1
            entry["verified"] = {
                "max_batch": batch,
                "total_bytes_by_batch": totals,
                "complete": batch + 1 in totals and (batch == 0 or batch in totals),
            }
        result["variants"][name] = entry
    return result
