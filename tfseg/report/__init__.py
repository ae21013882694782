"""The memory report: stock Keras vs memory-saving, measured, accounted, and fitted to a
budget.

`config` (what to measure), `compare` (the variants side by side), `fit`
(`tfseg.budget.fit`: the largest batch and crop under a budget), `verify` (those sizes
measured: `max_sizes`), `progress` (the report's time bound, progress lines and stop
request), `render` (the table, report.md and report.json) and `charts` (the PNG charts).
"""

from tfseg.budget import fit
from tfseg.report import render
from tfseg.report.compare import run
from tfseg.report.config import ReportConfig
from tfseg.report.verify import estimated_run_seconds, max_sizes

__all__ = ["ReportConfig", "estimated_run_seconds", "fit", "max_sizes", "render", "run"]
