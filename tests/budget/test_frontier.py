"""The plans a budget chooses from: candidates ordered by bytes saved per second of
recompute, the frontier built from them, and a saved plan kept on resume."""

import json

import pytest

from tfseg.config import Config
from tfseg.budget import Candidate, Choice, Plan, candidates, frontier, saved_choice
from tfseg.units import GIB


def _costs():
    # kept bytes and forward seconds per segment, as segment_costs reports them
    return {
        "entry_block1": {"kept_bytes": 600, "forward_seconds": 1.0},  # 600 B/s
        "entry_block3": {"kept_bytes": 100, "forward_seconds": 1.0},  # 100 B/s
        "exit_block1": {"kept_bytes": 0, "forward_seconds": 1.0},  # keeps nothing: no gain
        "aspp": {"kept_bytes": 50, "forward_seconds": 2.0},  # 25 B/s
        "decoder": {"kept_bytes": 900, "forward_seconds": 1.0},  # 900 B/s
        **{f"middle_unit{k}": {"kept_bytes": 100 * k, "forward_seconds": 1.0}
           for k in range(1, 7)},
    }


def test_candidates_are_ordered_by_bytes_saved_per_second_and_group_middle_units():
    found = candidates(_costs(), middle_repeats=6, group=4)
    assert [c.name for c in found] == ["decoder", "entry_block1", "middle_unit5..middle_unit6",
                                       "middle_unit1..middle_unit4", "entry_block3", "aspp"]
    groups = {c.name: c for c in found}
    assert groups["middle_unit1..middle_unit4"] == Candidate(
        "middle_unit1..middle_unit4", ("middle_unit1", "middle_unit2", "middle_unit3",
                                       "middle_unit4"), 1000, 4.0)
    assert groups["middle_unit5..middle_unit6"].bytes_per_second == pytest.approx(550)
    # exit_block1 keeps nothing and exit_block2 was not traced: neither is a candidate
    assert not {"exit_block1", "exit_block2"} & set(groups)


def test_frontier_adds_candidates_in_order_with_canonical_settings_the_config_accepts():
    found = candidates(_costs(), middle_repeats=6, group=4)
    plans = frontier(found, middle_repeats=6)
    assert plans[:2] == [Plan("stock", False), Plan("memory_saving", True)]
    assert [p.variant for p in plans] == ["stock", "memory_saving"] + ["recompute"] * 6
    assert [p.name for p in plans[2:]] == [f"+{c.name}" for c in found]
    assert plans[3].recompute == ("entry_block1", "decoder")  # --recompute's own order
    assert plans[-1].recompute_seconds == pytest.approx(sum(c.seconds for c in found))
    for before, after in zip(plans[2:], plans[3:]):
        assert set(before.recompute) < set(after.recompute)
        assert after.recompute_seconds > before.recompute_seconds
    for plan in plans:  # each plan is a valid run config
        config = Config().replace(middle_repeats=6, memory_saving=plan.memory_saving,
                                  recompute=plan.recompute)
        assert config.model.recompute == plan.recompute
    assert plans[-1].describe().startswith("memory saving + recompute entry_block1,")


def test_another_backbone_is_offered_the_heads_segments_only():
    """Xception-65's blocks are no candidates for a keras.applications backbone, even
    where costs name them; every plan of its frontier is a run config the backbone takes."""
    found = candidates(_costs(), middle_repeats=6, group=4, backbone="resnet50")
    assert [c.name for c in found] == ["decoder", "aspp"]
    plans = frontier(found, middle_repeats=2)
    assert [p.recompute for p in plans] == [(), (), ("decoder",), ("aspp", "decoder")]
    for plan in plans:
        config = Config().replace(backbone="resnet50", memory_saving=plan.memory_saving,
                                  recompute=plan.recompute)
        assert config.model.recompute == plan.recompute


def test_a_resumed_run_keeps_the_plan_saved_for_the_same_settings():
    config = Config().replace(memory_budget_gb=8.0, train_steps=100)
    plans = frontier(candidates(_costs(), middle_repeats=2), middle_repeats=2)
    points = tuple({"name": p.name, "predicted_bytes": 100} for p in plans)
    choice = Choice(plans[3], 8 * GIB, 0, points)
    saved = {**json.loads(config.to_json()), "memory_plan": json.loads(json.dumps(
        choice.to_dict()))}  # as config.json holds it
    assert saved_choice(config, saved, 0) == choice
    # Settings the plan does not depend on may change (a longer run); the others not.
    assert saved_choice(config.replace(train_steps=200, log_every=5), saved, 0) == choice
    for change in ({"memory_budget_gb": 11.0}, {"crop_size": (65, 65)}, {"batch_size": 2},
                   {"dtype_policy": "mixed_bfloat16"}, {"middle_repeats": 3},
                   {"backbone": "resnet50"}):
        assert saved_choice(config.replace(**change), saved, 0) is None, change
    assert saved_choice(config, saved, overhead=GIB) is None  # another device
    # A measured overhead varies a little from process to process: the same device.
    assert saved_choice(config, saved, overhead=32 << 20) == choice
    assert saved_choice(config, json.loads(config.to_json()), 0) is None  # no plan saved
