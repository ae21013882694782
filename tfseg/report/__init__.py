"""The memory report: stock Keras vs memory-saving, measured, accounted and planned.

`config` (what to measure), `compare` (the variants side by side), `planner`
(`tfseg.plan.fit`: the largest batch and crop under a budget), `verify` (the plan
measured) and `render` (the table, report.md, report.json and the chart).
"""

from tfseg.plan import fit as planner
from tfseg.report import render
from tfseg.report.compare import run
from tfseg.report.config import ReportConfig
from tfseg.report.verify import estimated_run_seconds, plan

__all__ = ["ReportConfig", "estimated_run_seconds", "plan", "planner", "render", "run"]
