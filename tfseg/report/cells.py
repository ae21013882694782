"""The measured figures of the report's tables (report.md's and the stdout table), with
"n/a" where a peak is unknown: the allocator counted too little of the step to measure it
(`tfseg.runtime.peak`), and then every ratio of it is unknown as well, never 0, nan or a
division by a stand-in.

Example:
    from tfseg.units import MIB
    cell(3 * MIB, ",.0f", MIB)   # "3"
    cell(None, ".2f")            # "n/a"
    stock_ratio({"variants": {"memory_saving": {}}}, {"ratio_to_stock": None})  # "-"
"""

from tfseg.runtime import peak


def cell(value, spec, unit=1):
    """``value / unit`` formatted with ``spec`` ("n/a" where ``value`` is None)."""
    return peak.UNKNOWN if value is None else format(value / unit, spec)


def stock_ratio(report, variant):
    """A variant's peak over stock's, two decimals: "-" where the report measured no stock
    variant, "n/a" where either peak is unknown."""
    if "stock" not in report["variants"]:
        return "-"
    return cell(variant["ratio_to_stock"], ".2f")


def unmeasured(report):
    """The sentence saying why a peak is "n/a"; "" where every peak is known."""
    names = [n for n, v in report["variants"].items() if v["measured_peak_bytes"] is None]
    if not names:
        return ""
    below = peak.ONEDNN_UNCOUNTED_BELOW // 1024
    return (f"n/a for {', '.join(names)}: the allocator counted too little of the step to "
            f"measure its peak (on the CPU it counts no buffer under {below} KiB, and this "
            f"step's are mostly smaller), and a ratio of an unknown peak is unknown too; a "
            f"larger crop or batch, or a GPU, measures it.")
