"""The report's host-side figures, beside the memory: the TensorFlow ops a warm step runs,
XLA's compile time, and the XLA blocks' time (`tfseg.profile.launches`), as cells of the
stdout table and report.md, and as report.md's table by block.

A variant measured without XLA has no compile time: its cell is NONE ("—"), as is the
cell of a report from before these figures.

Example:

    >>> from tfseg.report import launches
    >>> v = {"ops_per_step": 62, "compile_seconds": 47.3, "jit_mode": "blocks"}
    >>> launches.ops_cell(v), launches.compile_cell(v)
    ('62', '47.3')
    >>> launches.compile_cell({"ops_per_step": 11546, "compile_seconds": None})
    '—'
"""

NONE = "—"
# report.md's two columns beside the step time, and what they mean, under its table.
HEADER = ("TF ops run (per step)", "XLA compile time (s)")
SENTENCE = (f"The ops are those TensorFlow's executor ran in one profiled warm step (an XLA "
            f"launch is one); the compile time is the first step's time less a warm one's, "
            f"{NONE} where the step ran without XLA.")
# The stdout table's note on its "TF ops" and "compile s" columns.
NOTE = ("(TF ops: the ops TensorFlow's executor ran in one warm step, an XLA launch one; "
        f"compile s: the first step's time less a warm one's, {NONE} without XLA)")


def ops_cell(variant):
    """A variant's executed ops per warm step, "11,546", or NONE where not counted."""
    ops = variant.get("ops_per_step")
    return NONE if ops is None else f"{ops:,}"


def compile_cell(variant):
    """A variant's compile seconds, "47.3", or NONE where it ran without XLA."""
    seconds = variant.get("compile_seconds")
    return NONE if seconds is None else f"{seconds:.1f}"


def block_rows(report):
    """[(variant, block, forward ms, backward ms)] of the variants that ran XLA blocks
    (`--jit_compile=blocks`), each variant's blocks in the order they first ran."""
    return [(name, block, f"{1e3 * t['forward']:.2f}", f"{1e3 * t['backward']:.2f}")
            for name, v in report["variants"].items()
            for block, t in (v.get("time_by_block") or {}).items()]


def table_lines(report):
    """The stdout table's lines of the XLA time by block ([] without blocks)."""
    rows = block_rows(report)
    if not rows:
        return []
    lines = ["", "XLA time by block, one profiled warm step (ms; ops summed, on the CPU "
                 "over its threads):",
             f"  {'variant':<15}{'block':<18}{'forward':>10}{'backward':>10}"]
    return lines + [f"  {n:<15}{b:<18}{f:>10}{w:>10}" for n, b, f, w in rows]


def section(report):
    """report.md's "XLA time by block" section ([] where no variant ran XLA blocks)."""
    rows = block_rows(report)
    if not rows:
        return []
    header = ("variant", "block", "forward (ms)", "backward (ms)")
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return ["## XLA time by block", ""] + lines + [
        "", "The time of the XLA operations each block's computations ran in one profiled "
        "warm step (kernels on a GPU; on the CPU, XLA's operations on the host's threads, "
        "summed), its forward and backward passes apart. Blocks of the same structure share "
        "one computation (the middle flow's units, under the first unit's name).", ""]
