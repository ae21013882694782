"""The report's table and plot of the training planner's frontier."""

from PIL import Image

from tfseg.report import render
from tfseg.units import MIB


def _frontier():
    points = [
        {"name": "stock", "predicted_bytes": 900 * MIB, "time_over_memory_saving": 0.97},
        {"name": "memory_saving", "predicted_bytes": 500 * MIB, "time_over_memory_saving": 1.0},
        {"name": "+entry_block1", "predicted_bytes": 380 * MIB, "time_over_memory_saving": 1.05},
        {"name": "+middle_unit1..middle_unit4", "predicted_bytes": 300 * MIB,
         "time_over_memory_saving": 1.12},
    ]
    return {"budget_bytes": 600 * MIB, "overhead_bytes": 200 * MIB, "points": points,
            "fastest_fitting": "+entry_block1"}


def test_frontier_rows_mark_the_fastest_plan_that_fits_the_room():
    rows = render.frontier_rows(_frontier())
    assert "400 MiB to fit: the budget less 200 MiB device overhead" in rows[1]
    by_plan = {row.split()[0]: row.split()[1:] for row in rows[3:-1]}
    assert by_plan["stock"] == ["900", "0.97x", "no"]
    assert by_plan["memory_saving"] == ["500", "1.00x", "no"]
    assert by_plan["+entry_block1"][:2] == ["380", "1.05x"]
    assert rows[5].endswith("<- --mode=train's")
    assert by_plan["+middle_unit1..middle_unit4"] == ["300", "1.12x", "yes"]
    assert render.frontier_rows(None) == []


def test_frontier_chart_is_written_as_a_png(tmp_path):
    path = tmp_path / "frontier.png"
    render.frontier_chart(_frontier(), str(path))
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size == (700, 400)
