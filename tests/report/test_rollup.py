"""The report's roll-up: a backbone subtotal beside Xception-65's flows,
and the weights, optimizer slots and gradients as rows of the table of what is held at the
estimated peak, so that it reads like the reference breakdown (backbone / ASPP / decoder).

On the tiny DeepLabv3+ (width 0.125, 2 middle units) at 97x129: the training step
`--mode=train` runs (`tfseg.profile.step.build_step`: the run's optimizer, its counter),
traced and analysed as the measuring process analyses it (`tfseg.profile.child`), and
the report's row and document made from it."""

import pytest

from tests.report.test_accounting import _measured, _nbytes
from tfseg.memory.kept import kept_tensors, layer_names
from tfseg.models import xception65
from tfseg.profile import child
from tfseg.profile.step import StepConfig, build_step
from tfseg.report import document
from tfseg.report.compare import entry
from tfseg.units import MIB

TINY = dict(width_multiplier=0.125, middle_repeats=2)
FLOWS = ["entry_flow", "middle_flow", "exit_flow"]


@pytest.fixture(scope="module")
def analysed():
    """(model, optimizer, step graph, analysis) of the tiny model's training step."""
    config = StepConfig.of(num_classes=5, height=97, width=129, batch=1, **TINY)
    strategy, model, optimizer, step = build_step(config)
    batch = child.sample_batch(config, strategy)
    step(batch)  # builds the optimizer's slots, as training does
    analysis = child._analyze(config, step, batch, model, optimizer)
    return model, optimizer, step.get_concrete_function(batch).graph, analysis


def _backbone_kept_bytes(model, graph):
    """The kept tensors made by the layers of Xception-65 built alone (the same builder,
    so the same layer names): the backbone, found from its own model, not from parts."""
    backbone = layer_names(xception65(**TINY))
    names = layer_names(model)
    assert backbone < names  # the DeepLab model holds the whole backbone, and a head
    kept = kept_tensors(graph, graph.outputs[0], names)
    return sum(k.bytes for k in kept if k.layer in backbone)


def _rows(markdown, section):
    """{row name: the first variant's MiB} of the table under ``## section``."""
    lines = markdown.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0].splitlines()
    return {cells[0]: float(cells[1].replace(",", "")) for cells in
            ([c.strip() for c in line.strip("|").split("|")] for line in lines
             if line.startswith("| ") and not line.startswith("| part") and "---" not in line)}


def test_the_backbone_subtotal_is_its_flows_and_all_the_backbone_keeps(analysed):
    model, _, graph, analysis = analysed
    assert analysis["rollup"] == {"backbone": FLOWS}  # from the block specs' flows
    kept = analysis["kept_by_part"]
    assert set(FLOWS) <= set(kept) and "backbone" not in kept
    backbone = _backbone_kept_bytes(model, graph)
    assert sum(kept[flow] for flow in FLOWS) == backbone > 0
    # The head and the loss are not in it.
    assert kept["aspp"] > 0 and kept["decoder"] > 0
    assert backbone < analysis["kept_bytes"]

    report = {"config": {"height": 97, "width": 129}, "device": "CPU:0",
              "variants": {"stock": {**entry(_measured(analysis)), "ratio_to_stock": 1.0}}}
    rows = document.rolled_up(report, document.parts_in(report))
    assert rows[:4] == (("backbone", tuple(FLOWS)), *((f, (f,)) for f in FLOWS))
    text = document.markdown(report)
    kept_rows = _rows(text, "Kept for backward, by part of the model")
    subtotal = kept_rows["backbone (entry_flow + middle_flow + exit_flow)"]
    assert subtotal == round(backbone / MIB, 1)
    assert subtotal == pytest.approx(sum(kept_rows[f] for f in FLOWS), abs=0.15)


def test_weights_slots_and_gradients_are_rows_of_the_peak_table(analysed):
    model, optimizer, _, analysis = analysed
    held = analysis["held_at_peak"]
    assert list(held)[:3] == ["weights", "optimizer_slots", "gradients"]
    assert held["weights"] == _nbytes(model.weights)
    # SGD with momentum: a slot per trainable weight, and its iteration count; the step's
    # own counter is not the optimizer's.
    trainable = _nbytes(model.trainable_variables)
    assert held["optimizer_slots"] == _nbytes(optimizer.variables)
    assert trainable < held["optimizer_slots"] < trainable + 64
    # The step's own state besides: its int64 counter and the dropout's random state.
    seeds = [layer.seed_generator.state for layer in model._flatten_layers()
             if getattr(layer, "seed_generator", None) is not None]
    other = 8 + _nbytes(seeds)
    assert len(seeds) == 1 and analysis["optimizer_state_bytes"] == held["optimizer_slots"] + other
    # The gradients made by the peak: weights' gradients, at most all of them.
    assert 0 < held["gradients"] <= trainable == analysis["gradient_bytes"]
    assert held["gradients"] == analysis["peak_by_kind"]["gradients"]
    # The rows are the whole: what the process holds before the step, and the peak over it.
    assert sum(held.values()) == (analysis["parameter_bytes"] + analysis["optimizer_state_bytes"]
                                  + analysis["estimated_peak_bytes"])
    # The parts hold the buffers alive at the peak but the gradients.
    parts = {p: b for p, b in held.items() if p not in document.HOLDERS}
    assert sum(parts.values()) == analysis["estimated_peak_bytes"] - held["gradients"] + other

    report = {"config": {"height": 97, "width": 129}, "device": "CPU:0",
              "variants": {"stock": {**entry(_measured(analysis)), "ratio_to_stock": 1.0}}}
    rows = _rows(document.markdown(report), "Held at the estimated peak, by part")
    assert list(rows)[:4] == ["weights", "optimizer_slots", "gradients",
                              "backbone (entry_flow + middle_flow + exit_flow)"]
    assert rows["weights"] == round(held["weights"] / MIB, 1)
    assert rows["optimizer_slots"] == round(held["optimizer_slots"] / MIB, 1)
    assert rows["backbone (entry_flow + middle_flow + exit_flow)"] == round(
        sum(held[f] for f in FLOWS) / MIB, 1)
