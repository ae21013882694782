"""The markdown table of `benchmarks/gpu.py`, with the figures it is compared with.

The CPU figure beside a row is read from docs/benchmarks.md, the one place tfseg's
figures are kept (with their date and command): `SOURCES` names the section and table
row of each (peak over base, step time; 2-core CPU, oneDNN's allocator). `PADDLE` is
PaddlePaddle's published full-resolution figure, on another card.

    import gpu_table                                  # from benchmarks/
    gpu_table.cpu_figure("513x513 b2", "stock")      # 'PEAK MiB, STEP s (CPU, DATE)'
"""

import os
import re

from tfseg.units import GB, MIB

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                    "benchmarks.md")
_FULL = "Full Cityscapes resolution, 1024x2048, batch 1"
# (size, row name) -> (docs/benchmarks.md's `## ` heading, the row's first cell there).
SOURCES = {
    ("513x513 b2", "stock"): ("Training step memory, 513x513, batch 2", "stock"),
    ("513x513 b2", "memory_saving"): ("Training step memory, 513x513, batch 2", "memory saving"),
    ("513x513 b2", "recompute"): ("Training step memory, 513x513, batch 2", "recompute"),
    ("1024x2048 b1", "memory_saving"): (_FULL, "memory saving"),
    ("1024x2048 b1", "recompute"): (_FULL, "recompute"),
    ("1024x2048 b1", "memory_saving_bf16"): (_FULL, "memory saving, `mixed_bfloat16`"),
    ("1024x2048 b1", "recompute_bf16"): (_FULL, "recompute, `mixed_bfloat16`"),
}
# PaddlePaddle's DeepLabv3+ at 1024x2048 (seed 000), its published figures.
PADDLE = {"card": "GTX 1080 Ti", "memory_gb": 10.2, "seconds_per_iteration": 0.85}
_DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def _f(value, fmt):
    return "-" if value is None else format(value, fmt)


def _cells(line):
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _number(cell):
    """The first number of a cell ("3,563 MiB" -> 3563.0, "9.76 s" -> 9.76), or None."""
    found = re.search(r"\d[\d,]*(?:\.\d+)?", cell.replace("*", ""))
    return float(found.group().replace(",", "")) if found else None


def tables(text, heading):
    """The tables under `## heading` of a markdown `text`: [(context, header, rows)], where
    context is the text from the heading or the previous table down to the table, header
    the first row's cells (lower case) and rows each row's cells."""
    section = text.split(f"\n## {heading}\n", 1)[-1] if f"\n## {heading}\n" in text else ""
    section = section.split("\n## ", 1)[0]
    found, context, table = [], [], []
    for line in section.splitlines() + [""]:
        if line.startswith("|"):
            table.append(_cells(line))
            continue
        if table:
            found.append(("\n".join(context), [c.lower() for c in table[0]], table[2:]))
            context, table = [], []
        context.append(line)
    return found


def cpu_figures(path=DOCS):
    """{(size, row name): (peak over base MiB, step seconds or None, what it is)} read
    from the markdown file at `path`; rows it does not hold are left out, and a missing
    file gives {} (the table then says "-")."""
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        text = "\n" + f.read()
    figures = {}
    for key, (heading, label) in SOURCES.items():
        for context, header, rows in tables(text, heading):
            peak = next((i for i, c in enumerate(header) if "peak over base" in c), None)
            row = next((r for r in rows if r[0] == label), None)
            if peak is None or row is None:
                continue
            step = header.index("step") if "step" in header else None
            dates = _DATE.findall(context)  # the last is the nearest the table
            what = ("CPU static estimate" if "estimated" in header[peak] else "CPU") + (
                f", {dates[-1]}" if dates else "")
            figures[key] = (int(_number(row[peak])),
                            _number(row[step]) if step is not None else None, what)
            break
    return figures


def cpu_figure(size, name, figures=None):
    """docs/benchmarks.md's figure for the row (or `figures`' when given), or "-"."""
    known = (cpu_figures() if figures is None else figures).get((size, name))
    if not known:
        return "-"
    peak, seconds, what = known
    return f"{peak:,} MiB" + (f", {seconds:.2f} s" if seconds else "") + f" ({what})"


def row_line(row, stock, figures=None):
    """One markdown row; `stock` is the same size's stock row (or None), `figures` the
    CPU figures (`cpu_figures()`, read once per table)."""
    r = row.get("result") or {}
    if "error" in row:
        return f"| {row['size']} | {row['name']} | failed: {row['error'][:120]} |" + " |" * 8
    peak = r.get("peak_over_base_bytes")
    ratio_mem = ratio_time = None
    if stock and stock.get("result") and peak is not None:
        ratio_mem = peak / max(1, stock["result"]["peak_over_base_bytes"])
        ratio_time = r["step_seconds"] / max(1e-9, stock["result"]["step_seconds"])
    total = None if peak is None else (peak + r["base_bytes"]) / GB
    return (f"| {row['size']} | {row['name']} | {_f(r.get('base_bytes', 0) / MIB, ',.0f')} | "
            f"{_f(peak and peak / MIB, ',.0f')} | {_f(total, '.2f')} | "
            f"{_f(ratio_mem, '.2f')} | {_f(r.get('step_seconds'), '.3f')} | "
            f"{_f(ratio_time, '.2f')} | {_f(r.get('gpu_utilisation_percent'), '.0f')} | "
            f"{len(row.get('runs', []))} | {cpu_figure(row['size'], row['name'], figures)} |")


def markdown(summary):
    """The whole markdown page of one run: steps, parity, overhead, what was skipped."""
    lines = [f"## {summary['card']} ({summary['date']}, {summary['minutes']:.1f} min)", "",
             f"`{summary['command']}`", "", f"Model: {summary['model']}.", "",
             "| size | row | base MiB | peak over base MiB | total GB | x stock | step s | "
             "x stock | GPU util % | processes | CPU figure (docs/benchmarks.md) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    rows = summary["rows"]
    stocks = {r["size"]: r for r in rows if r["name"] == "stock"}
    figures = cpu_figures()
    for row in rows:
        lines.append(row_line(row, stocks.get(row["size"]), figures))
    full = [r["size"] for r in rows if r["size"].startswith("1024x2048")]
    if full:
        lines.append(f"| {full[0]} | PaddlePaddle, {PADDLE['card']} (a different card) | - | - | "
                     f"{PADDLE['memory_gb']} | - | {PADDLE['seconds_per_iteration']} | - | - | "
                     f"- | published figure |")
    lines += ["", "Peak over base: the allocator's peak during a step over what it held "
              "before (median over the timed steps, then over processes); total: base + "
              "peak, GB of 10^9 bytes; step: median seconds; GPU util: NVML's utilisation, "
              "sampled every 50 ms during the timed steps.", ""]
    lines += ["| parity | NVIDIA_TF32_OVERRIDE | TF32 | memory saving | recompute | "
              "memory saving, grouped depthwise |", "| --- | --- | --- | --- | --- | --- |"]
    for p in summary["parity"]:
        if "error" in p:
            lines.append(f"| {p.get('dtype')} | - | - | failed: {p['error'][:120]} | |")
            continue
        e = p["relative_error"]
        lines.append(f"| {p['dtype']} | {p['tf32_override']} | {'on' if p['tf32'] else 'off'} | "
                     f"{e['memory_saving']:.2e} | {e['recompute']:.2e} | "
                     f"{_grouped_cell(e.get('memory_saving_grouped'))} |")
    lines += ["", "Parity: the largest gradient difference from stock's over the largest "
              "stock gradient, one training step on the same weights.", ""]
    overhead = summary["overhead"]
    lines.append(f"Device overhead: {_f(overhead.get('bytes') and overhead['bytes'] / MIB, ',.0f')}"
                 f" MiB ({overhead.get('source')}); under a real step, process memory "
                 f"outside the allocator: "
                 f"{_f(overhead.get('under_step_bytes') and overhead['under_step_bytes'] / MIB, ',.0f')}"
                 f" MiB (an upper bound: the allocator's spare regions count too).")
    for note in summary["skipped"]:
        lines.append(f"- skipped: {note}")
    for row in rows:
        lines += profile_lines(row)
    return "\n".join(lines) + "\n"


def _grouped_cell(value):
    """The grouped form's parity: a ratio, its error line, or "-" (not run: the CPU)."""
    return value[:80] if isinstance(value, str) else _f(value, ".2e")


def profile_lines(row, top=12):
    """Where one profiled step's time went (`tfseg.profile.timeline`'s summary in the
    row's result), as a paragraph and a table by op type; [] without a profile."""
    found = (row.get("result") or {}).get("profile")
    if not found:
        return []
    wall, device, host = found["wall_seconds"], found["device"], found["host"]
    head = f"**Where the time goes, {row['size']} {row['name']}** (one profiled step, {wall:.3f} s"
    if device:
        head += (f"; the kernels fill {device['busy_seconds']:.3f} s of it, "
                 f"{100 * device['busy_seconds'] / wall:.0f}%, in {device['kernels']:,} kernels")
    head += f"; the host's ops take {host['op_seconds']:.3f} s over {host['ops']:,} ops):"
    on_host = {kind: (seconds, n) for kind, seconds, n in host["by_type"]}
    kinds = [k for k, _, _ in (device or host)["by_type"]][:top]
    lines = ["", head, "", "| op type | device s | kernels | host s | host ops |",
             "| --- | --- | --- | --- | --- |"]
    on_device = {kind: (seconds, n) for kind, seconds, n in (device or {}).get("by_type", [])}
    for kind in kinds:
        d, h = on_device.get(kind), on_host.get(kind)
        lines.append(f"| {kind} | {_f(d and d[0], '.4f')} | {_f(d and d[1], ',')} | "
                     f"{_f(h and h[0], '.4f')} | {_f(h and h[1], ',')} |")
    return lines
