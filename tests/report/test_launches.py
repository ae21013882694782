"""The report's host-side figures (tfseg/report/launches.py): executed ops a warm step and
XLA compile time beside the memory and step time, and the XLA time by block."""

import json

import pytest

from tests.report.test_outputs import _report
from tfseg import report as report_lib
from tfseg.profile.step import StepConfig
from tfseg.report import render

BY_BLOCK = {"entry_stem": {"forward": 0.0004, "backward": 0.0011},
            "decoder": {"forward": 0.0019, "backward": 0.0055}}


def _with_launches():
    """A report of "stock" uncompiled and "memory_saving" under --jit_compile=blocks."""
    report = _report(400, frontier=False)
    report["variants"]["stock"].update(jit_mode="off", ops_per_step=11546,
                                       async_ops_per_step=0, compile_seconds=None,
                                       time_by_block={})
    report["variants"]["memory_saving"].update(jit_mode="blocks", ops_per_step=62,
                                               async_ops_per_step=22, compile_seconds=47.25,
                                               time_by_block=BY_BLOCK)
    return report


def test_the_table_shows_ops_and_compile_time_beside_the_step_time():
    lines = render.table(_with_launches()).splitlines()
    header = lines[0]
    assert header.index("step s") < header.index("TF ops") < header.index("compile s")
    stock = next(line for line in lines if line.startswith("stock"))
    saving = next(line for line in lines if line.startswith("memory_saving"))
    assert "11,546" in stock and stock.split()[8] == "—"  # no XLA: no compile time
    assert saving.split()[7:9] == ["62", "47.2"]
    assert any(line.startswith("(TF ops:") for line in lines)
    by_block = lines[lines.index(next(x for x in lines if x.startswith("XLA time by block"))) + 2:]
    assert by_block[0].split() == ["memory_saving", "entry_stem", "0.40", "1.10"]
    assert by_block[1].split() == ["memory_saving", "decoder", "1.90", "5.50"]


def test_report_md_has_the_two_columns_and_a_section_by_block():
    text = render.markdown(_with_launches())
    assert "| TF ops run (per step) | XLA compile time (s) |" in text
    assert "| 0.50 | 11,546 | — |" in text and "| 0.50 | 62 | 47.2 |" in text
    assert "## XLA time by block" in text
    assert "| variant | block | forward (ms) | backward (ms) |" in text
    assert "| memory_saving | decoder | 1.90 | 5.50 |" in text


def test_a_report_without_the_figures_shows_dashes_and_no_block_section():
    """A report.json written before them, or variants that ran no XLA blocks."""
    old = _report(400, frontier=False)
    text, table = render.markdown(old), render.table(old)
    assert "| 0.50 | — | — |" in text and "XLA time by block" not in text
    assert "XLA time by block" not in table and "—" in table.splitlines()[1]


def test_report_json_keeps_the_figures(tmp_path):
    render.write(_with_launches(), str(tmp_path))
    written = json.loads((tmp_path / "report.json").read_text())["variants"]
    assert written["memory_saving"]["time_by_block"] == BY_BLOCK
    assert written["stock"]["compile_seconds"] is None
    assert written["stock"]["ops_per_step"] == 11546


@pytest.mark.slow  # a tiny network's blocks compiled in a fresh process: ~90 s on 2 cores
@pytest.mark.xdist_group("measure")
@pytest.mark.timeout(600)
def test_a_blocks_report_measures_the_launches_of_each_variant(tmp_path):
    step = StepConfig.of(num_classes=5, height=33, width=49, batch=1, width_multiplier=0.125,
                         middle_repeats=1, timed_steps=0, jit_compile="blocks")
    config = report_lib.ReportConfig(step=step, variants=("memory_saving",), repeats=1,
                                     device_overhead_gb=0.0, out_dir=str(tmp_path))
    result = report_lib.run(config, log=lambda line: None)
    v = result["variants"]["memory_saving"]
    assert v["jit_mode"] == "blocks" and 0 < v["async_ops_per_step"] <= v["ops_per_step"] <= 80
    assert v["compile_seconds"] > 1.0
    assert {"entry_stem", "middle_unit1", "aspp", "decoder"} <= set(v["time_by_block"])
    assert "launches" not in result["config"]  # a per-variant setting, as "analyze" is
    text = (tmp_path / "report.md").read_text()
    assert "## XLA time by block" in text and f"| {v['ops_per_step']} |" in text
