"""What a report measures: `ReportConfig`, and the step each variant runs."""

import dataclasses

from tfseg.config import MEMORY_ANCHORS
from tfseg.profile.anchors import anchor_step
from tfseg.profile.step import VARIANTS, StepConfig


@dataclasses.dataclass(frozen=True)
class ReportConfig:
    """What `tfseg.report.run` measures.

    Args:
      step: the configuration of one training step (its per-variant fields,
        `variant`, `recompute_blocks` and `analyze*`, are ignored).
      variants: measured side by side, each in `repeats` fresh processes (the
        median is reported, as the recipe in `tfseg.profile.measure` says):
        `tfseg.profile.step.VARIANTS` and `tfseg.config.MEMORY_ANCHORS`.
      repeats: fresh processes per variant.
      recompute_blocks: the backbone blocks the "recompute" variant recomputes
        (None: `tfseg.models.xception.DEFAULT_RECOMPUTE`).
      memory_budget_gb: predict the largest batch and square crop under this budget
        in GiB (None: none).
      frontier: with a budget, also estimate every training plan of the frontier
        (`tfseg.budget.estimate_frontier`) and which would fit.
      device_overhead_gb: the part of the budget outside the allocator
        (`tfseg.runtime.device.overhead`: -1 measures it; 0 on the CPU).
      verify_sizes: measure the predicted largest sizes for real.
      max_verify_seconds: skip (and record as skipped) a verification run whose
        estimated cost is above this: the variant's own run, its step time scaled
        by the size ratio.
      max_verify_runs: at most this many verification runs per variant.
      max_minutes: the report's time bound (None: none): no verification run starts
        that would end after this many minutes from the report's start; the sizes it
        would have measured are reported as estimates (`sizes_measured`: false).
      out_dir: where report.json, report.md and the charts go.
    """

    step: StepConfig = StepConfig()
    variants: tuple = VARIANTS
    repeats: int = 3
    recompute_blocks: tuple = None
    memory_budget_gb: float = None
    frontier: bool = False
    device_overhead_gb: float = -1.0
    verify_sizes: bool = True
    max_verify_seconds: float = 300.0
    max_verify_runs: int = 6
    max_minutes: float = None
    out_dir: str = "report"


# Fields of `StepConfig` that differ between the variants of one report.
PER_VARIANT = ("variant", "recompute_blocks", "analyze", "analyze_batches", "builder",
               "launches")


def variant_step(config, name):
    """The `StepConfig` that variant `name` of `config` measures: analysed, its warm
    step's executed ops counted (`tfseg.profile.launches`), and, when there is a budget
    to fit, also traced at twice the batch (the budget fit's per-sample slope).

    Args:
      config: a `ReportConfig`.
      name: one of `config.variants`.
    """
    step = config.step
    extra = (2 * step.batch,) if config.memory_budget_gb else ()
    if name in MEMORY_ANCHORS:  # on the recompute variant's segments
        return anchor_step(step, name).replace(recompute_blocks=config.recompute_blocks,
                                               analyze=True, analyze_batches=extra,
                                               launches=True)
    blocks = config.recompute_blocks if name == "recompute" else ()
    return step.replace(variant=name, recompute_blocks=blocks, analyze=True,
                        analyze_batches=extra, launches=True)
