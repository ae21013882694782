"""The measuring process's analysis (tfseg/profile/child.py), in this process: which part
of the model each kept tensor is counted to."""

import pytest

from tfseg.profile import child
from tfseg.profile.step import StepConfig, build_step


def _analysis(**fields):
    config = StepConfig.of(num_classes=5, height=65, width=97, batch=2, **fields)
    strategy, model, _, step = build_step(config)
    batch = child.sample_batch(config, strategy)
    step(batch)
    return child._analyze(config, step, batch, model)


@pytest.mark.slow  # a keras.applications build and trace: 20-60 s on 2 cores
@pytest.mark.parametrize("backbone", ["mobilenetv2"])
def test_another_backbones_layers_are_counted_as_the_backbone(backbone):
    """(Before: the backbone's tensors fell under "loss_and_other", with the loss's.)"""
    analysis = _analysis(backbone=backbone, width_multiplier=0.25)
    kept = analysis["kept_by_part"]
    assert {"backbone", "aspp", "decoder"} <= set(kept)
    assert not {"entry_flow", "middle_flow", "exit_flow"} & set(kept)
    total = analysis["kept_bytes"]
    assert sum(kept.values()) == total and kept["backbone"] > 0.2 * total
    assert kept.get("loss_and_other", 0) < 0.05 * total


def test_xception_has_its_flows_and_no_backbone_part():
    kept = _analysis(width_multiplier=0.125, middle_repeats=1)["kept_by_part"]
    assert {"entry_flow", "middle_flow", "exit_flow", "aspp", "decoder"} <= set(kept)
    assert "backbone" not in kept
