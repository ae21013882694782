"""The plans a memory budget chooses from, fastest first.

A plan is stock, memory saving (the twins), or memory saving plus recompute
segments (`--recompute` names). Each segment, recomputed, saves the bytes its
layers keep for the backward pass and costs one more run of its forward ops. The
candidates are ordered by bytes saved per second of recompute, and the frontier
adds them in that order: each plan keeps less and runs longer than the one before,
so the first plan that fits a budget is the fastest that fits.

Checkmate (Jain et al., MLSys 2020, https://arxiv.org/abs/1910.02653) picks what to
recompute exactly, as an integer program over the graph; PyTorch's activation
memory budget (torch.compile) solves a knapsack of recompute runtime. This is the
greedy, explainable version of the same trade: one ratio per segment, read off the
traced memory-saving step (`tfseg.profile.analysis.segment_costs`).
"""

import dataclasses

from tfseg.config import RECOMPUTE_BLOCKS, RECOMPUTE_HEAD, recompute_names, unit_name
from tfseg.config.names import BUILTIN_BACKBONE

# Middle units are recomputed in groups of this many: 16 single units would make a
# frontier of near-identical steps, and one group of 16 too coarse a step.
MIDDLE_GROUP = 4


@dataclasses.dataclass(frozen=True)
class Candidate:
    """Segments recomputed together: what they keep and the forward seconds they
    run again (static estimates)."""

    name: str
    segments: tuple
    kept_bytes: int
    seconds: float

    @property
    def bytes_per_second(self):
        return self.kept_bytes / max(self.seconds, 1e-12)


@dataclasses.dataclass(frozen=True)
class Plan:
    """One point of the frontier.

    Args:
      name: "stock", "memory_saving" or "+<candidate>" (what this plan adds).
      memory_saving: the twins (`--memory_saving`).
      recompute: the `--recompute` names, in their canonical order.
      recompute_seconds: the forward seconds the recompute runs again (estimated).
    """

    name: str
    memory_saving: bool
    recompute: tuple = ()
    recompute_seconds: float = 0.0

    @property
    def variant(self):
        """The profiler's variant (`tfseg.profile.step.VARIANTS`) of this plan."""
        if self.recompute:
            return "recompute"
        return "memory_saving" if self.memory_saving else "stock"

    def describe(self):
        if not self.memory_saving:
            return "stock"
        if not self.recompute:
            return "memory saving"
        return f"memory saving + recompute {','.join(self.recompute)}"


def candidates(costs, middle_repeats, group=MIDDLE_GROUP, backbone=BUILTIN_BACKBONE):
    """The recompute candidates, best bytes per second first.

    Args:
      costs: {segment: {"kept_bytes", "forward_seconds"}} of the memory-saving
        step (`segment_costs`); segments missing from it keep nothing.
      middle_repeats: the model's middle units, recomputed in `group`s.
      backbone: the `--backbone`; Xception-65's blocks are candidates only for it,
        the head's segments ("aspp", "decoder") for every backbone.
    """
    xception = backbone == BUILTIN_BACKBONE
    units = [unit_name("middle", k) for k in range(1, middle_repeats + 1)] if xception else []
    blocks = RECOMPUTE_BLOCKS if xception else ()
    groups = [tuple(units[i:i + group]) for i in range(0, len(units), group)]
    single = [name for name in blocks + RECOMPUTE_HEAD if name != "middle"]
    found = []
    for segments in [(name,) for name in single] + groups:
        kept = sum(costs.get(s, {}).get("kept_bytes", 0) for s in segments)
        seconds = sum(costs.get(s, {}).get("forward_seconds", 0.0) for s in segments)
        if kept > 0:
            name = segments[0] if len(segments) == 1 else f"{segments[0]}..{segments[-1]}"
            found.append(Candidate(name, segments, kept, seconds))
    return sorted(found, key=lambda c: -c.bytes_per_second)


def frontier(ordered, middle_repeats):
    """stock, memory saving, then memory saving plus the first k of `ordered`
    candidates for each k: the plans in order of step time."""
    plans = [Plan("stock", False), Plan("memory_saving", True)]
    chosen, seconds = set(), 0.0
    canonical = recompute_names(middle_repeats)
    for candidate in ordered:
        chosen |= set(candidate.segments)
        seconds += candidate.seconds
        recompute = tuple(n for n in canonical if n in chosen)
        plans.append(Plan(f"+{candidate.name}", True, recompute, seconds))
    return plans
