"""A peak the allocator could not measure (`tfseg.runtime.peak`) is "n/a" in the report,
and so is every ratio of it: never 0, nan or a division by a stand-in; the stdout table's
columns stay apart whatever a cell's width."""

import json

import pytest

from tests.report.test_outputs import _report
from tfseg import report as report_lib
from tfseg.profile.step import StepConfig
from tfseg.report import render
from tfseg.runtime import device


def _rows(table, names):
    return {line.split()[0]: line for line in table.splitlines()
            if line.split() and line.split()[0] in names}


def _assert_unknown_shown(report, unknown, known):
    table, text = render.table(report), render.markdown(report)
    assert "nan" not in table and "nan" not in text
    rows = _rows(table, report["variants"])
    header = table.splitlines()[0]
    for name, line in rows.items():
        # as many cells as the header has columns, each apart from the next
        assert len(line.split()) == len(render.COLUMNS) + 1, (header, line)
        measured, largest, x_stock, _, est_meas = line.split()[1:6]
        if name in unknown:
            assert measured == largest == x_stock == est_meas == "n/a", line
        else:
            assert "n/a" not in (measured, largest, est_meas), line
    assert f"n/a for {', '.join(unknown)}: the allocator counted too little" in table
    for name in unknown:
        assert f"| {name} | n/a | n/a | n/a |" in text
    for name in known:
        assert f"| {name} | n/a" not in text


def test_an_unknown_peak_and_its_ratios_are_shown_as_unknown(tmp_path):
    report = _report(400, frontier=False)
    saving, stock = report["variants"]["memory_saving"], report["variants"]["stock"]
    saving.update(measured_peak_bytes=None, measured_peak_max_bytes=None,
                  measured_peak_by_process_bytes=[None], estimate_ratio=None,
                  ratio_to_stock=None)
    stock["estimate_ratio"] = 1569865.0  # wider than its column
    _assert_unknown_shown(report, ["memory_saving"], ["stock"])
    render.write(report, str(tmp_path))
    written = json.loads((tmp_path / "report.json").read_text())["variants"]["memory_saving"]
    assert written["measured_peak_bytes"] is None and written["estimate_ratio"] is None


@pytest.mark.slow
@pytest.mark.xdist_group("measure")
@pytest.mark.skipif(device.name() != "CPU:0", reason="a GPU's allocator counts every buffer")
def test_a_step_too_small_for_the_cpu_allocator_reports_an_unknown_peak(tmp_path):
    """The new user's report: at 33x49, width 0.125, the memory-saving step allocates no
    buffer of 256 KiB or more, which is all oneDNN's CPU allocator counts (it read 0, and
    the report said "x stock 0.00", nan on stdout, "estimate / measured 1569865");
    stock's does (about 9 MiB counted)."""
    step = StepConfig.of(height=33, width=49, batch=1, width_multiplier=0.125,
                         middle_repeats=1, num_classes=19, timed_steps=0)
    config = report_lib.ReportConfig(step=step, variants=("stock", "memory_saving"), repeats=1,
                                     out_dir=str(tmp_path))
    result = report_lib.run(config, log=lambda line: None)
    stock, saving = result["variants"]["stock"], result["variants"]["memory_saving"]
    assert stock["measured_peak_bytes"] >= 2**20 and stock["ratio_to_stock"] == 1.0
    assert saving["measured_peak_bytes"] is None and saving["measured_peak_max_bytes"] is None
    assert saving["ratio_to_stock"] is None and saving["estimate_ratio"] is None
    assert saving["static_estimate_bytes"] > 0  # the estimate itself is known
    _assert_unknown_shown(result, ["memory_saving"], ["stock"])
    written = json.loads((tmp_path / "report.json").read_text())
    assert written["variants"]["memory_saving"]["measured_peak_bytes"] is None
