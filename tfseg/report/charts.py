"""The report's charts, drawn with matplotlib (Agg: no display needed): parts.png (each
part's kept tensors, a bar per variant), parts_stacked.png (a bar per variant, stacked
by part) and frontier.png (memory against step time, a point per training plan).
``tfseg.report.render.write`` draws them beside report.json and report.md.

Example:
    report = json.load(open("runs/x/report/report.json"))
    chart(report, "parts.png")
    frontier_chart(report["frontier"], "frontier.png")   # where the report has one
"""

from tfseg.report import document
from tfseg.units import MIB


def frontier_chart(frontier, path):
    """Memory against step time, one point per plan (frontier.png)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = frontier["points"]
    fig, ax = plt.subplots(figsize=(7, 4))
    x = [p["time_over_memory_saving"] for p in points]
    y = [p["predicted_bytes"] / MIB for p in points]
    ax.plot(x, y, "o-")
    for p, xi, yi in zip(points, x, y):
        ax.annotate(p["name"], (xi, yi), fontsize=7, xytext=(4, 2), textcoords="offset points")
    room = (frontier["budget_bytes"] - frontier["overhead_bytes"]) / MIB
    ax.axhline(room, color="red", linestyle="--", label="budget less device overhead")
    ax.set_xlabel("estimated step time (x memory saving)")
    ax.set_ylabel("estimated total (MiB)")
    ax.set_title("Training plans: memory against step time")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _kept(report, name, parts):
    return [report["variants"][name]["kept_by_part_bytes"].get(p, 0) / MIB for p in parts]


def chart(report, path):
    """parts.png: each part's kept tensors, one bar per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, parts = list(report["variants"]), document.parts_in(report)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / max(1, len(names))
    for k, name in enumerate(names):
        ax.bar([i + k * width for i in range(len(parts))], _kept(report, name, parts), width,
               label=name)
    ax.set_xticks([i + width * (len(names) - 1) / 2 for i in range(len(parts))], parts, rotation=20)
    ax.set_xlabel("part of the model")
    ax.set_ylabel("kept for backward (MiB)")
    ax.set_title(f"Kept for backward, by part: {document.title(report)}", fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def stacked_chart(report, path):
    """parts_stacked.png: one bar per variant, its kept tensors stacked by part."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, parts = list(report["variants"]), document.parts_in(report)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bottom = [0.0] * len(names)
    for i, part in enumerate(parts):
        values = [_kept(report, name, parts)[i] for name in names]
        ax.bar(names, values, 0.6, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, values)]
    for x, total in enumerate(bottom):
        ax.annotate(f"{total:,.0f} MiB", (x, total), ha="center", va="bottom", fontsize=8)
    ax.set_xlabel("variant")
    ax.set_ylabel("kept for backward (MiB)")
    ax.set_title(f"Kept for backward, stacked by part: {document.title(report)}", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
