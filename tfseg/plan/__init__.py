"""Plans that fit a memory budget: `fit` (the largest batch and crop of a measured
step), `frontier` (stock, memory saving, then recompute segments, fastest first)
and `choose` (`--memory_budget_gb` for training: the fastest plan that fits)."""

from tfseg.plan import fit
from tfseg.plan.choose import (GB, GPU_OVERHEAD_GB, MARGIN, Choice, choose, estimate_frontier,
                               overhead_bytes, plan_run, saved_choice)
from tfseg.plan.frontier import Candidate, Plan, candidates, frontier

__all__ = ["GB", "GPU_OVERHEAD_GB", "MARGIN", "Candidate", "Choice", "Plan", "candidates", "choose",
           "estimate_frontier", "fit", "frontier", "overhead_bytes", "plan_run", "saved_choice"]
