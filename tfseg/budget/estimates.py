"""What is known of each plan of a step's frontier (`tfseg.budget.frontier`): its static
estimate (the step traced in a fresh process, never run, once per plan) and, where
`tfseg.budget.choose` asks, its measured total (one step run in a fresh process).
`estimate_frontier` estimates every plan: the report's table and plot.

Example:
    step = StepConfig(run=config, num_classes=19, timed_steps=0)
    points = estimate_frontier(step)  # a dict per plan: predicted bytes, step time ratio
"""

import functools

from tfseg.budget.frontier import Plan, candidates, frontier
from tfseg.profile import measure as measure_lib


def _total(result):
    return result["base_bytes"] + result["peak_over_base_bytes"]


class FrontierEstimates:
    """The frontier of `step` and what is known of each plan: static estimates (each
    traced in a fresh process, once) and measured totals."""

    def __init__(self, step, log, measure, stop=None):
        self.step, self.log = step, log
        self.measure = functools.partial(measure, stop=stop) if stop is not None else measure
        self.base = step.replace(analyze=True, analyze_batches=(), run_steps=False)
        self.estimates, self.measured = {}, {}
        repeats = step.run.model.middle_repeats
        self.analysis = self.estimate(Plan("memory_saving", True))["analysis"]
        # Another backbone than Xception-65: the head's segments only.
        self.plans = frontier(candidates(self.analysis.get("segments", {}), repeats,
                                         backbone=step.run.model.backbone), repeats)
        seconds = self.estimates["memory_saving"].get("wall_seconds", 0.0)
        self.log(f"{len(self.plans)} plans on the frontier, each estimated in a fresh "
                 f"process of about {seconds:.0f} s: at most about "
                 f"{seconds * (len(self.plans) - 1):.0f} s more")

    def estimate(self, plan):
        if plan.name not in self.estimates:
            count = f" ({len(self.estimates) + 1}/{len(self.plans)})" if hasattr(
                self, "plans") else ""
            self.log(f"estimating {plan.describe()}{count} ...")
            self.estimates[plan.name] = self.measure(self.base.replace(
                variant=plan.variant, recompute_blocks=plan.recompute))
        return self.estimates[plan.name]

    def predicted(self, i):
        return _total(self.estimate(self.plans[i]))

    def measured_total(self, i):
        """Plan i's measured total; its prediction where the allocator counted too
        little of the step to measure it (`tfseg.runtime.peak`; recorded as None)."""
        plan = self.plans[i]
        if plan.name not in self.measured:
            self.log(f"verifying {plan.describe()} with one measured step ...")
            try:
                result = self.measure(self.base.replace(
                    variant=plan.variant, recompute_blocks=plan.recompute, run_steps=True,
                    analyze=False, timed_steps=0))
                self.measured[plan.name] = (None if result["peak_over_base_bytes"] is None
                                            else _total(result))
            except measure_lib.OutOfMemory:
                self.measured[plan.name] = float("inf")
        measured = self.measured[plan.name]
        return self.predicted(i) if measured is None else measured

    def time_ratio(self, plan):
        """Estimated step time over memory saving's: from the plan's own traced step
        where it was estimated, else from the seconds its recompute adds."""
        seconds = self.analysis.get("estimated_step_seconds")
        if not seconds:
            return None
        own = self.estimates.get(plan.name, {}).get("analysis", {})
        return round((own.get("estimated_step_seconds") or seconds + plan.recompute_seconds)
                     / seconds, 3)

    def points(self):
        return tuple({
            "name": p.name, "describe": p.describe(), "memory_saving": p.memory_saving,
            "recompute": list(p.recompute),
            "predicted_bytes": _total(self.estimates[p.name]) if p.name in self.estimates
            else None,
            # a step that ran out of memory is recorded as such: config.json stays JSON
            "measured_bytes": None if self.measured.get(p.name) in (None, float("inf"))
            else self.measured[p.name],
            "measured_out_of_memory": self.measured.get(p.name) == float("inf"),
            "time_over_memory_saving": self.time_ratio(p)} for p in self.plans)


def estimate_frontier(step, log=print, measure=measure_lib.measure, stop=None):
    """Every plan of `step`'s frontier, estimated (the report's table and plot): the
    `Choice.points` dicts. `stop`: as `choose`'s."""
    plans = FrontierEstimates(step, log, measure, stop)
    for i in range(len(plans.plans)):
        plans.predicted(i)
    return plans.points()
