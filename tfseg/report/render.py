"""Report outputs: the stdout table, report.md and report.json, and the charts
(``tfseg.report.charts``), written together."""

import json
import math

from tfseg.io.outputs import staged
from tfseg.report import cells, document, launches
from tfseg.report.charts import chart, frontier_chart, stacked_chart
from tfseg.units import MIB

# The static model replays TF's executor and allocator, not XLA's scheduler and buffer
# assignment (the twins hold their recompute back under XLA too:
# `tfseg.layers.gating.gated`).
XLA_CAVEAT = ("(jit_compile: the measured rows are XLA's; the static estimate and the "
              "breakdown model TF's executor running the same step without XLA)")


def _mib(value):
    return "-" if value is None else f"{value / MIB:.0f}"


def _overhead(record):
    """", device overhead N MiB (its source)" of a report's "device_overhead", or ""."""
    if not record:
        return ""
    size = "?" if record["overhead_bytes"] is None else f"{record['overhead_bytes'] / MIB:.0f}"
    return f", device overhead {size} MiB: {record['overhead_source']}"


def _labels(rows):
    """The printed row names of `document.rolled_up`'s rows: a subtotal's parts (the
    rows after it) indented under it."""
    inside = {p for label, of in rows if of != (label,) for p in of}
    return [f"  {label}" if label in inside else label for label, _ in rows]


# The stdout table's columns after the variant's name: (header, width).
COLUMNS = (("measured MiB", 13), ("max", 6), ("x stock", 8), ("static est", 11),
           ("est/meas", 9), ("step s", 8), ("TF ops", 8), ("compile s", 10), ("params", 8),
           ("grads", 7), ("slots", 7), ("activ.", 8), ("/sample", 9))


def _row(first, texts):
    """A line of the stdout table: each cell right-aligned in its column, and a space
    before it even where it is wider than the column (it then pushes the rest right)."""
    return f"{first:<15}" + "".join(f" {t:>{w - 1}}" for t, (_, w) in zip(texts, COLUMNS))


def _variant_rows(report):
    """The table's head: one row per variant, then its notes and caveats."""
    rows = [_row("variant", [h for h, _ in COLUMNS])]
    for name, v in report["variants"].items():
        a = v["accounted"]
        rows.append(_row(name, [
            cells.cell(v["measured_peak_bytes"], ".0f", MIB),
            cells.cell(v["measured_peak_max_bytes"], ".0f", MIB), cells.stock_ratio(report, v),
            f"{v['static_estimate_bytes'] / MIB:.0f}", cells.cell(v["estimate_ratio"], ".2f"),
            f"{v['step_seconds']:.2f}", launches.ops_cell(v), launches.compile_cell(v),
            *(f"{a[k] / MIB:.0f}" for k in ("parameter_bytes", "gradient_bytes",
                                            "optimizer_slot_bytes", "activation_bytes",
                                            "per_sample_activation_bytes"))]))
    note = cells.unmeasured(report)
    if note:
        rows.append(f"({note})")
    repeats = {len(v["measured_peak_by_process_bytes"]) for v in report["variants"].values()}
    rows.append(f"(measured: the median over {'/'.join(map(str, sorted(repeats)))} fresh processes "
                f"of each one's median step peak over its base; max: the largest step peak seen)")
    rows.append(launches.NOTE)
    rows.append(f"(device: {report['device']}{_overhead(report.get('device_overhead'))})")
    for name, error in (report.get("failed") or {}).items():
        rows.append(f"({name} did not run: {error})")
    if report["config"]["jit_compile"] not in (False, "off"):
        rows.append(XLA_CAVEAT)
    blocks = {n: v["recompute_blocks"] for n, v in report["variants"].items() if v["recompute_blocks"]}
    for name, b in blocks.items():
        rows.append(f"({name} recomputes: {', '.join(b)})")
    return rows


def _part_rows(report):
    """Each variant's kept activations by part (%), then what it holds at the estimated
    peak by part (MiB)."""
    rows = ["", "where the kept activations go (% of each variant's):",
            f"{'part':<16}" + "".join(f"{n:>15}" for n in report["variants"])]
    parts = document.rolled_up(report, document.parts_in(report))
    for name, (_, of) in zip(_labels(parts), parts):
        cells = "".join(f"{sum(v['breakdown_percent'].get(p, 0.0) for p in of):>14.1f}%"
                        for v in report["variants"].values())
        rows.append(f"{name:<16}{cells}")
    rows.append("")
    held = "held_at_peak_bytes"
    if not all(v.get(held) for v in report["variants"].values()):
        held = "peak_by_part_bytes"  # a report from before the holders
    rows.append("held at the estimated peak (MiB; 'allocator': its rounding and reuse):")
    rows.append(f"{'part':<16}" + "".join(f"{n:>15}" for n in report["variants"]))
    parts = document.rolled_up(report, document.parts_in(report, held))
    for name, (_, of) in zip(_labels(parts), parts):
        cells = "".join(f"{sum(v[held].get(p, 0) for p in of) / MIB:>15.1f}"
                        for v in report["variants"].values())
        rows.append(f"{name:<16}{cells}")
    return rows


def _size_rows(report):
    """The largest batch and square crop each variant fits, and how far they were
    measured, when the report has them."""
    sizes = report.get("max_sizes")
    if not sizes:
        return []
    size = f"{report['config']['height']}x{report['config']['width']}"
    rows = ["", f"largest sizes, budget {sizes['budget_gb']} GiB at {size} "
                f"(totals include the base):"]
    for name, p in sizes["variants"].items():
        unverified = ("" if p.get("sizes_measured", True)
                      else " (estimates, not all measured)" if _measured_any(p)
                      else " (estimates, none measured)")
        rows.append(f"  {name:<15} predicted max batch {p['max_batch']:>3}, square crop at batch 1 "
                    f"{p['max_square_crop']:>5}{unverified}")
        check = p.get("verified")
        if check is not None:
            sizes = ", ".join(f"b{b}={_mib(t)}" for b, t in sorted(check["total_bytes_by_batch"].items()))
            rows.append(f"  {'':<15} measured: max batch {check['max_batch']} ({sizes} MiB)")
        crop = p.get("crop_verified")
        if crop is not None:
            sizes = ", ".join(f"{c}={_mib(t)}" for c, t in sorted(crop["total_bytes_by_crop"].items()))
            rows.append(f"  {'':<15} measured: max crop {crop['max_square_crop']} ({sizes} MiB)")
        for kind, sizes in (p.get("skipped") or {}).items():
            for size, why in sorted(sizes.items()):
                rows.append(f"  {'':<15} not verified at {kind} {size}: {why['reason']} "
                            f"(~{why['estimated_seconds']:.0f} s)")
    return rows


def _measured_any(p):
    """Whether a size check of variant entry `p` ran a size to its end (one that did
    not fit counts)."""
    return any((p.get(check) or {}).get(totals) for check, totals in
               (("verified", "total_bytes_by_batch"), ("crop_verified", "total_bytes_by_crop")))


def table(report):
    """The stdout table of `report`: the variants, where their memory goes, their
    largest sizes and the frontier of training plans."""
    rows = _variant_rows(report) + _part_rows(report)
    rows += launches.table_lines(report)
    rows += _size_rows(report)
    rows += frontier_rows(report.get("frontier"))
    return "\n".join(rows)


def frontier_rows(frontier):
    """The frontier of training plans: one row per plan, fastest first."""
    if not frontier:
        return []
    room = frontier["budget_bytes"] - frontier["overhead_bytes"]
    overhead = frontier["overhead_bytes"] / MIB
    rows = ["", f"training plans, fastest first (static estimates of the total; "
                f"{room / MIB:.0f} MiB to fit: the budget less {overhead:.0f} MiB device "
                f"overhead):",
            f"  {'plan':<36}{'MiB':>8}{'time':>7}  fits"]
    for p in frontier["points"]:
        fits = "<- --mode=train's" if p["name"] == frontier["fastest_fitting"] else (
            "yes" if p["predicted_bytes"] <= room else "no")
        rows.append(f"  {p['name']:<36}{_mib(p['predicted_bytes']):>8}"
                    f"{p['time_over_memory_saving'] or float('nan'):>6.2f}x  {fits}")
    rows.append("  (time: the estimated step time over memory saving's; each plan adds its "
                "segment to the recompute of the plan above)")
    return rows


def caveats(report):
    """The sentences a stopped or time-bounded report opens with (none for a whole one)."""
    lines = []
    partial = report.get("partial")
    if partial:
        lines.append(f"**Partial report**: stopped by {partial['signal']} before it finished; "
                     f"missing: {', '.join(partial['missing'])}. What it shows was measured or "
                     f"estimated before the stop.")
    if report.get("time_bound_reached"):
        lines.append("**Time bound reached** (--report_max_minutes): the sizes marked \"not "
                     "checked (time bound)\" were not measured; the largest sizes shown for "
                     "them are the budget fit's predictions (\"sizes_measured\": false in "
                     "report.json).")
    return lines


def markdown(report):
    """report.md (`tfseg.report.document`), opening with the caveats of a stopped or
    time-bounded report."""
    notes = [f"{name} did not run: {error}" for name, error in (report.get("failed") or {}).items()]
    if report["config"].get("jit_compile") not in (None, False, "off"):
        notes.append(XLA_CAVEAT.strip("()"))
    return document.markdown(report, caveats(report), notes)


def _strict(value):
    """`value` with every infinite float (a verification run that failed: it did not
    fit) as null, so that report.json is strict JSON."""
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return None if isinstance(value, float) and math.isinf(value) else value


def write(report, out_dir):
    """report.json, report.md, parts.png (and frontier.png, or none) in ``out_dir``: each
    file whole, renamed into place together, report.json last; the folder's other
    files are left alone."""
    with staged(out_dir, last=("report.json",)) as stage:
        with open(stage.path("report.json"), "w") as f:
            json.dump(_strict(report), f, indent=2, allow_nan=False)
        with open(stage.path("report.md"), "w") as f:
            f.write(markdown(report))
        chart(report, stage.path("parts.png"))
        stacked_chart(report, stage.path("parts_stacked.png"))
        if report.get("frontier"):
            frontier_chart(report["frontier"], stage.path("frontier.png"))
        else:
            stage.remove("frontier.png")  # an older report's
