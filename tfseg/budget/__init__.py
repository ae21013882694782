"""What fits a memory budget: `fit` (the largest batch and crop of a measured step),
`frontier` (the plans: stock, memory saving, then recompute segments, fastest first),
`estimates` (each plan's estimated and measured totals) and `choose`
(`--memory_budget_gb` for training: the fastest plan that fits)."""

from tfseg.budget import fit
from tfseg.budget.choose import MARGIN, Choice, choose, estimate_frontier, plan_run, saved_choice
from tfseg.budget.frontier import Candidate, Plan, candidates, frontier

__all__ = ["MARGIN", "Candidate", "Choice", "Plan", "candidates", "choose",
           "estimate_frontier", "fit", "frontier", "plan_run", "saved_choice"]
