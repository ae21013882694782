"""report.md: the memory report as a document (the stdout table is `render.table`).

A configuration summary, then markdown tables with units in every header, each with a
sentence saying what it measures, and the words the tables use explained once.
"""

from tfseg.report import cells, launches
from tfseg.units import MIB

# What the process holds besides the parts' buffers: before the step (weights, slots) and
# the gradients computed by the peak (`held_at_peak` of tfseg/profile/analysis.py).
HOLDERS = ("weights", "optimizer_slots", "gradients")
PARTS = ("backbone", "entry_flow", "middle_flow", "exit_flow", "aspp", "decoder",
         "loss_and_other")

WORDS = [
    "**Kept for backward**: the forward tensors the backward pass reads (a layer's input "
    "or output that its gradient needs). They are made during the forward pass and all "
    "alive when the backward pass starts; the memory-saving twins keep fewer of them.",
    "**Held at the peak**: what the process holds at the step's highest point "
    "(estimated): the weights and optimizer slots, the gradients computed so far (the "
    "backward pass's buffers of a trainable weight's shape), then the kept tensors not "
    "yet consumed and the backward pass's temporaries, each counted to the part whose "
    "layer made it; \"allocator\" is its rounding and reuse.",
    "**backbone**: Xception-65's entry, middle and exit flows together (its subtotal), "
    "or the whole of another backbone; **aspp** and **decoder** are the head.",
    "**loss_and_other**: tensors no part of the model made: the input batch and its "
    "normalisation, the logits' resize to the labels, the loss and its gradient, weight "
    "decay and the optimizer's update (and, held at the peak, the step's counter and "
    "random states).",
    "**Peak over base**: what one training step adds to what the process held before it "
    "(the weights and optimizer slots), as the allocator measures it.",
]


def _mib(value, digits=0):
    return "-" if value is None else f"{value / MIB:,.{digits}f}"


def _table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def title(report):
    """"DeepLabv3+ (xception65), 513x513, batch 2, float32": the configuration in a line."""
    c = report["config"]
    return (f"DeepLabv3+ ({c.get('backbone', 'xception65')}), {c['height']}x{c['width']}, "
            f"batch {c.get('batch', '?')}, {c.get('dtype_policy', 'float32')}")


def configuration(report):
    """The settings that matter for memory, as a table."""
    c = report["config"]
    backbone = c.get("backbone", "xception65")
    if backbone == "xception65" and "width_multiplier" in c:
        backbone += f" (width {c['width_multiplier']}, {c['middle_repeats']} middle units)"
    overhead = report.get("device_overhead") or {}
    device = report.get("device", "?")
    if overhead.get("overhead_bytes") is not None:
        device += (f" (device overhead {_mib(overhead['overhead_bytes'])} MiB: "
                   f"{overhead['overhead_source']})")
    recomputed = {n: v["recompute_blocks"] for n, v in report["variants"].items()
                  if v.get("recompute_blocks")}
    rows = [("crop (pixels)", f"{c['height']} x {c['width']}"),
            ("batch (images)", c.get("batch", "?")),
            ("backbone", backbone),
            ("output stride", c.get("output_stride", "?")),
            ("normalisation", c.get("norm", "?")),
            ("dtype policy", c.get("dtype_policy", "float32")),
            ("XLA (jit_compile)", {True: "step", False: "off", None: "off"}.get(
                c.get("jit_compile"), c.get("jit_compile"))),
            ("device", device),
            ("variants", ", ".join(report["variants"]))]
    rows += [(f"{name} recomputes", ", ".join(blocks)) for name, blocks in recomputed.items()]
    return (_table(("setting", "value"), rows)
            + ["", "Every setting, by its flag name: `report.json` (\"config\")."])


def peaks(report):
    variants = report["variants"]
    repeats = sorted({len(v["measured_peak_by_process_bytes"]) for v in variants.values()})
    rows = [(name, cells.cell(v["measured_peak_bytes"], ",.0f", MIB),
             cells.cell(v["measured_peak_max_bytes"], ",.0f", MIB), cells.stock_ratio(report, v),
             _mib(v["static_estimate_bytes"]), cells.cell(v["estimate_ratio"], ".2f"),
             f"{v['step_seconds']:.2f}", launches.ops_cell(v), launches.compile_cell(v))
            for name, v in variants.items()]
    header = ("variant", "peak over base (MiB)", "largest step (MiB)", "x stock",
              "static estimate (MiB)", "estimate / measured", "step time (s)") + launches.HEADER
    return _table(header, rows) + [
        "", f"The allocator's peak during one training step over its base: the median over "
        f"{'/'.join(map(str, repeats))} fresh processes of each one's median step (largest: "
        f"the largest step seen); the static estimate replays the traced step on a model of "
        f"TensorFlow's executor and allocator, without running it. {launches.SENTENCE} "
        f"{cells.unmeasured(report)}".rstrip()]


def holdings(report):
    rows = []
    for name, v in report["variants"].items():
        a = v["accounted"]
        rows.append((name, _mib(a["parameter_bytes"], 1), _mib(a["gradient_bytes"], 1),
                     _mib(a["optimizer_slot_bytes"], 1), _mib(a["activation_bytes"]),
                     _mib(a["per_sample_activation_bytes"])))
    header = ("variant", "weights (MiB)", "gradients (MiB)", "optimizer slots (MiB)",
              "kept for backward (MiB)", "kept per image (MiB)")
    return _table(header, rows) + [
        "", "What each variant holds for one step, from the traced step: the weights and "
        "optimizer slots exist before it (the base), the gradients and the kept tensors "
        "during it."]


KINDS = ("kept_for_backward", "gradients", "other", "allocator")


def decomposition(report):
    """Each variant's step decomposed: the base (weights, optimizer slots; the measured
    base beside them), then what the step adds at its estimated peak, by kind, beside
    the measured peak over base."""
    rows = []
    for name, v in report["variants"].items():
        kinds = v.get("peak_by_kind_bytes")
        if not kinds:
            return []  # a report from before the decomposition
        a = v["accounted"]
        rows.append((name, _mib(a["parameter_bytes"]), _mib(a["optimizer_slot_bytes"]),
                     _mib(v.get("base_bytes")), *(_mib(kinds.get(k, 0)) for k in KINDS),
                     _mib(sum(kinds.values())), cells.cell(v["measured_peak_bytes"], ",.0f", MIB),
                     cells.cell(v["estimate_ratio"], ".2f")))
    header = ("variant", "weights (MiB)", "optimizer slots (MiB)", "measured base (MiB)",
              "kept for backward, alive (MiB)", "gradients (MiB)", "other buffers (MiB)",
              "allocator rounding (MiB)", "estimated peak over base (MiB)",
              "measured peak over base (MiB)", "estimate / measured")
    return ["## What the peak is made of", ""] + _table(header, rows) + [
        "", "Before the step the process holds the weights and optimizer slots (the base; "
        "the allocator's measured base beside them also counts what TensorFlow keeps "
        "between steps, and on the CPU may leave out what it allocated before its "
        "statistics began). At the step's estimated peak it adds the kept tensors still "
        "alive, the gradients computed so far (the backward pass's buffers of a trainable "
        "weight's shape), other buffers (the backward pass's temporaries, forward tensors "
        "not yet freed) and the allocator's rounding: their sum is the static estimate, "
        "beside the measured peak over base.", ""]


def parts_in(report, key="kept_by_part_bytes"):
    """The parts the report's variants name under ``key``, in the model's order: the
    weights, optimizer slots and gradients where ``key`` has them, Xception-65's flows,
    or "backbone" for another backbone, then the head."""
    named = {p for v in report["variants"].values() for p in v[key]}
    order = HOLDERS + PARTS
    return tuple(p for p in order if p in named) + tuple(sorted(named - set(order)))


def rolled_up(report, parts):
    """``parts`` with the variants' subtotals ("rollup": {"backbone": its flows}) before
    their first part: (label, the parts it sums) pairs, a part alone as (part, (part,)).

    Example: ``rolled_up(report, ("entry_flow", "middle_flow", "exit_flow", "aspp"))``
    is ``(("backbone", (the three flows)), ("entry_flow", ("entry_flow",)), ...,
    ("aspp", ("aspp",)))`` for a report on Xception-65."""
    rollup = {}
    for v in report["variants"].values():
        rollup.update({name: tuple(of) for name, of in (v.get("rollup") or {}).items()})
    rows = []
    for part in parts:
        rows += [(name, of) for name, of in rollup.items() if of and part == of[0]]
        rows.append((part, (part,)))
    return tuple(rows)


def by_part(report, key, parts, sentence):
    variants = report["variants"]
    totals = {n: max(1, sum(v[key].values())) for n, v in variants.items()}
    header = ["part"] + [f"{n} ({unit})" for n in variants for unit in ("MiB", "%")]
    rows = []
    for label, of in rolled_up(report, parts):
        cells = [label if of == (label,) else f"{label} ({' + '.join(of)})"]
        for name, v in variants.items():
            size = sum(v[key].get(part, 0) for part in of)
            cells += [_mib(size, 1), f"{100 * size / totals[name]:.1f}"]
        rows.append(cells)
    return _table(header, rows) + ["", sentence]


def _verified(p):
    """What the size checks of one variant measured, and what they left, in words."""
    said = []
    check, crop = p.get("verified"), p.get("crop_verified")
    if check and check.get("max_batch") is not None:
        said.append(f"batch {check['max_batch']} fits, measured"
                    + ("" if check.get("complete", True) else " (larger not tried)"))
    if crop and crop.get("max_square_crop") is not None:
        said.append(f"crop {crop['max_square_crop']} fits, measured")
    for kind, sizes_ in (p.get("skipped") or {}).items():
        said += [f"{kind} {size} not checked ({why['reason']})" for size, why in sorted(sizes_.items())]
    return "; ".join(said) or ("estimates" if not p.get("sizes_measured", True) else "-")


def sizes(report):
    found = report.get("max_sizes")
    if not found:
        return []
    rows = []
    for name, p in found["variants"].items():
        rows.append((name, p["max_batch"], p["max_square_crop"], _verified(p)))
    header = ("variant", "largest batch (images)", "largest square crop at batch 1 (pixels)",
              "verified")
    return ["## Largest sizes under the budget", ""] + _table(header, rows) + [
        "", f"The largest batch at this crop and the largest square crop at batch 1 whose "
        f"total (base + peak) fits {found['budget_gb']} GiB less the device overhead: the "
        f"budget fit's prediction, and where verified, the measured runs (report.json).", ""]


def plans(report):
    frontier = report.get("frontier")
    if not frontier:
        return []
    room = frontier["budget_bytes"] - frontier["overhead_bytes"]
    rows = [(p["name"], _mib(p["predicted_bytes"]),
             "-" if p["time_over_memory_saving"] is None else f"{p['time_over_memory_saving']:.2f}",
             "yes (the training run's)" if p["name"] == frontier["fastest_fitting"] else (
                 "yes" if p["predicted_bytes"] <= room else "no"))
            for p in frontier["points"]]
    header = ("plan", "estimated total (MiB)", "step time (x memory saving)", "fits")
    return ["## Training plans, fastest first", ""] + _table(header, rows) + [
        "", f"Each plan adds one recompute segment to the plan above; static estimates, "
        f"against {_mib(room)} MiB (the budget less {_mib(frontier['overhead_bytes'])} MiB "
        f"of device overhead).", "", "![training plans](frontier.png)", ""]


def markdown(report, caveats=(), notes=()):
    """The whole report.md of ``report`` (a `tfseg.report.run` result)."""
    # A report from before the holders has its parts alive at the peak alone.
    held = ("held_at_peak_bytes" if all(v.get("held_at_peak_bytes") for v in
                                        report["variants"].values()) else "peak_by_part_bytes")
    lines = [f"# Memory report: {title(report)}", ""]
    for line in caveats:
        lines += [line, ""]
    lines += ["## Configuration", ""] + configuration(report) + [""]
    lines += ["## Peak memory of one training step", ""] + peaks(report) + [""]
    lines += [f"- {note}" for note in notes] + ([""] if notes else [])
    lines += launches.section(report)
    lines += ["## What each variant holds", ""] + holdings(report) + [""]
    lines += decomposition(report)
    lines += ["## Kept for backward, by part of the model", ""] + by_part(
        report, "kept_by_part_bytes", parts_in(report),
        "The forward tensors the backward pass reads, counted to the part whose layer made "
        "them, in MiB and as a share of the variant's.") + [""]
    lines += ["![kept for backward, by part](parts.png)",
              "![kept for backward, stacked by part](parts_stacked.png)", ""]
    lines += ["## Held at the estimated peak, by part", ""] + by_part(
        report, held, parts_in(report, held),
        "What the process holds at the static estimate's peak: the weights and optimizer "
        "slots (the base), the gradients computed by then, and every other buffer alive, "
        "counted to the part whose layer made it; a subtotal's parts follow it. The rows "
        "sum to the base plus the static estimate.") + [""]
    lines += sizes(report) + plans(report)
    lines += ["## The words these tables use", ""] + [f"- {w}" for w in WORDS] + [""]
    return "\n".join(lines)
