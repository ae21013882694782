"""The markdown table of `benchmarks/gpu.py`, with the figures it is compared with.

`CPU` holds docs/benchmarks.md's canonical CPU figure of each row that has one (peak
over base, step time; 2-core CPU, oneDNN's allocator); `PADDLE` PaddlePaddle's published
full-resolution figure, on another card.
"""

MIB = 2**20

# (size, row name) -> (peak over base MiB, step seconds or None, what it is).
CPU = {
    ("513x513 b2", "stock"): (3563, 9.76, "CPU, 2026-11-24"),
    ("513x513 b2", "memory_saving"): (1109, 9.77, "CPU, 2026-11-24"),
    ("513x513 b2", "recompute"): (740, 11.41, "CPU, 2026-11-24"),
    ("1024x2048 b1", "stock"): (12967, None, "CPU, 2026-11-23"),
    ("1024x2048 b1", "memory_saving"): (4015, None, "CPU, 2026-11-24"),
    ("1024x2048 b1", "recompute"): (2723, None, "CPU, 2026-11-24"),
    ("1024x2048 b1", "memory_saving_bf16"): (2398, None, "CPU static estimate"),
    ("1024x2048 b1", "recompute_bf16"): (1885, None, "CPU static estimate"),
}
# PaddlePaddle's DeepLabv3+ at 1024x2048 (seed 000), its published figures.
PADDLE = {"card": "GTX 1080 Ti", "memory_gb": 10.2, "seconds_per_iteration": 0.85}


def _f(value, fmt):
    return "-" if value is None else format(value, fmt)


def cpu_figure(size, name):
    """docs/benchmarks.md's figure for the row, or "-"."""
    known = CPU.get((size, name))
    if not known:
        return "-"
    peak, seconds, what = known
    return f"{peak:,} MiB" + (f", {seconds:.2f} s" if seconds else "") + f" ({what})"


def row_line(row, stock):
    """One markdown row; `stock` is the same size's stock row (or None)."""
    r = row.get("result") or {}
    if "error" in row:
        return f"| {row['size']} | {row['name']} | failed: {row['error'][:120]} |" + " |" * 8
    peak = r.get("peak_over_base_bytes")
    ratio_mem = ratio_time = None
    if stock and stock.get("result") and peak is not None:
        ratio_mem = peak / max(1, stock["result"]["peak_over_base_bytes"])
        ratio_time = r["step_seconds"] / max(1e-9, stock["result"]["step_seconds"])
    total = None if peak is None else (peak + r["base_bytes"]) / 1e9
    return (f"| {row['size']} | {row['name']} | {_f(r.get('base_bytes', 0) / MIB, ',.0f')} | "
            f"{_f(peak and peak / MIB, ',.0f')} | {_f(total, '.2f')} | "
            f"{_f(ratio_mem, '.2f')} | {_f(r.get('step_seconds'), '.3f')} | "
            f"{_f(ratio_time, '.2f')} | {_f(r.get('gpu_utilisation_percent'), '.0f')} | "
            f"{len(row.get('runs', []))} | {cpu_figure(row['size'], row['name'])} |")


def markdown(summary):
    """The whole markdown page of one run: steps, parity, overhead, what was skipped."""
    lines = [f"## {summary['card']} ({summary['date']}, {summary['minutes']:.1f} min)", "",
             f"`{summary['command']}`", "", f"Model: {summary['model']}.", "",
             "| size | row | base MiB | peak over base MiB | total GB | x stock | step s | "
             "x stock | GPU util % | processes | CPU figure (docs/benchmarks.md) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    rows = summary["rows"]
    stocks = {r["size"]: r for r in rows if r["name"] == "stock"}
    for row in rows:
        lines.append(row_line(row, stocks.get(row["size"])))
    full = [r["size"] for r in rows if r["size"].startswith("1024x2048")]
    if full:
        lines.append(f"| {full[0]} | PaddlePaddle, {PADDLE['card']} (a different card) | - | - | "
                     f"{PADDLE['memory_gb']} | - | {PADDLE['seconds_per_iteration']} | - | - | "
                     f"- | published figure |")
    lines += ["", "Peak over base: the allocator's peak during a step over what it held "
              "before (median over the timed steps, then over processes); total: base + "
              "peak, GB of 10^9 bytes; step: median seconds; GPU util: NVML's utilisation, "
              "sampled every 50 ms during the timed steps.", ""]
    lines += ["| parity | NVIDIA_TF32_OVERRIDE | TF32 | memory saving | recompute |",
              "| --- | --- | --- | --- | --- |"]
    for p in summary["parity"]:
        if "error" in p:
            lines.append(f"| {p.get('dtype')} | - | - | failed: {p['error'][:120]} | |")
            continue
        e = p["relative_error"]
        lines.append(f"| {p['dtype']} | {p['tf32_override']} | {'on' if p['tf32'] else 'off'} | "
                     f"{e['memory_saving']:.2e} | {e['recompute']:.2e} |")
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
    return "\n".join(lines) + "\n"
