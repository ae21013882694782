import json

import pytest
from PIL import Image

from tfseg import report
from tfseg.memory.measure import StepConfig
from tfseg.report import planner

ACCOUNTED = {"parameter_bytes", "gradient_bytes", "optimizer_slot_bytes", "activation_bytes",
             "per_sample_activation_bytes", "total_bytes"}


@pytest.mark.slow
def test_report_measures_accounts_and_explains(tmp_path):
    step = StepConfig(height=257, width=257, batch=2, width_multiplier=0.5, middle_repeats=4,
                      timed_steps=0)
    config = report.ReportConfig(step=step, variants=("stock", "memory_saving"),
                                 out_dir=str(tmp_path))
    result = report.run(config, log=lambda *_: None)
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert on_disk["variants"].keys() == {"stock", "memory_saving"}
    for name, v in on_disk["variants"].items():
        assert ACCOUNTED <= v["accounted"].keys()
        assert {"measured_peak_bytes", "static_estimate_bytes", "step_seconds", "ratio_to_stock",
                "kept_by_part_bytes", "breakdown_percent"} <= v.keys()
        assert {"entry_flow", "middle_flow", "exit_flow", "aspp", "decoder"} <= v["kept_by_part_bytes"].keys()
        assert abs(sum(v["breakdown_percent"].values()) - 100) < 1e-6
        # The graph analysis predicts the allocator's peak.
        ratio = v["static_estimate_bytes"] / v["measured_peak_bytes"]
        assert 0.85 <= ratio <= 1.15, (name, ratio)
    stock, saving = on_disk["variants"]["stock"], on_disk["variants"]["memory_saving"]
    assert saving["measured_peak_bytes"] < 0.8 * stock["measured_peak_bytes"]
    assert saving["accounted"]["parameter_bytes"] == stock["accounted"]["parameter_bytes"]
    with Image.open(tmp_path / "parts.png") as chart:
        assert chart.size[0] > 300
    assert "memory_saving" in (tmp_path / "report.md").read_text()
    assert "entry_flow" in report.render.table(result)


@pytest.mark.slow
def test_planned_batch_fits_and_one_more_does_not(tmp_path):
    step = StepConfig(height=161, width=161, batch=2, width_multiplier=0.25, middle_repeats=2,
                      timed_steps=0)
    config = report.ReportConfig(step=step, variants=("memory_saving",), memory_budget_gb=0.08,
                                 out_dir=str(tmp_path))
    plan = report.run(config, log=lambda *_: None)["plan"]["variants"]["memory_saving"]
    check = plan["verified"]
    totals = {int(b): t for b, t in check["total_bytes_by_batch"].items()}
    budget = 0.08 * 2**30
    batch = check["max_batch"]
    assert batch >= 1 and check["complete"]
    assert totals[batch] <= budget < totals[batch + 1]


def test_fit_solves_the_linear_memory_model():
    measured = {"batch": 2, "height": 100, "width": 100, "base_bytes": 100,
                "peak_over_base_bytes": 1100, "analysis": {"gradient_bytes": 100}}
    fit = planner.fit(measured, budget_bytes=2700)
    assert fit.per_sample_bytes == 500 and fit.fixed_bytes == 200
    assert fit.max_batch == 5  # 200 + 5 * 500 = 2700
    assert fit.max_square_crop == 223  # 200 + 500 * (223 / 100) ** 2 <= 2700 < ... 224
    assert planner.fit(measured, budget_bytes=150).max_batch == 0
