"""What a report measures: `ReportConfig`, and the step each variant runs."""

import dataclasses

from tfseg.profile.step import VARIANTS, StepConfig


@dataclasses.dataclass(frozen=True)
class ReportConfig:
    """What `tfseg.report.run` measures.

    Args:
      step: the configuration of one training step (its per-variant fields,
        `variant`, `recompute_blocks` and `analyze*`, are ignored).
      variants: measured side by side, each in `repeats` fresh processes (the
        median is reported, as the recipe in `tfseg.profile.measure` says).
      repeats: fresh processes per variant.
      recompute_blocks: the backbone blocks the "recompute" variant recomputes
        (None: `tfseg.models.xception.DEFAULT_RECOMPUTE`).
      memory_budget_gb: plan the largest batch and square crop under this budget
        (None: no planner).
      verify_plan: measure the planned sizes for real.
      max_verify_seconds: skip (and record as skipped) a verification run whose
        estimated cost is above this: the variant's own run, its step time scaled
        by the size ratio.
      max_verify_runs: at most this many verification runs per variant.
      out_dir: where report.json, report.md and parts.png go.
    """

    step: StepConfig = StepConfig()
    variants: tuple = VARIANTS
    repeats: int = 3
    recompute_blocks: tuple = None
    memory_budget_gb: float = None
    verify_plan: bool = True
    max_verify_seconds: float = 300.0
    max_verify_runs: int = 6
    out_dir: str = "report"


# Fields of `StepConfig` that differ between the variants of one report.
PER_VARIANT = ("variant", "recompute_blocks", "analyze", "analyze_batches")


def variant_step(config, name):
    """The `StepConfig` that variant `name` of `config` measures: analysed, and,
    when there is a budget to plan for, also traced at twice the batch (the
    planner's per-sample slope).

    Args:
      config: a `ReportConfig`.
      name: one of `config.variants`.
    """
    step = config.step
    blocks = config.recompute_blocks if name == "recompute" else ()
    extra = (2 * step.batch,) if config.memory_budget_gb else ()
    return step.replace(variant=name, recompute_blocks=blocks, analyze=True,
                        analyze_batches=extra)
