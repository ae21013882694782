"""report.md as a document (tfseg/report/document.py): the configuration summary, real
markdown tables with units in their headers, a sentence under each, the words explained."""

import re

from tests.report.test_outputs import _report
from tfseg.report import document, render
from tfseg.units import MIB


def _tables(text):
    """{section title: [header cells]} of each markdown table, by the ## above it."""
    tables, section = {}, None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("## "):
            section = line[3:]
        elif line.startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("| ---"):
            tables[section] = [c.strip() for c in line.strip("|").split("|")]
    return tables


def test_the_report_opens_with_its_configuration_and_names_it_in_the_title():
    report = _report(400)
    report["config"].update(batch=2, backbone="xception65", width_multiplier=1.0,
                            middle_repeats=16, output_stride=16, norm="batch",
                            dtype_policy="mixed_bfloat16")
    text = render.markdown(report)
    assert text.startswith("# Memory report: DeepLabv3+ (xception65), 64x64, batch 2, "
                           "mixed_bfloat16\n")
    for row in ("| crop (pixels) | 64 x 64 |", "| batch (images) | 2 |",
                "| backbone | xception65 (width 1.0, 16 middle units) |",
                "| output stride | 16 |", "| normalisation | batch |",
                "| dtype policy | mixed_bfloat16 |", "| device | CPU:0 |"):
        assert row in text, row
    assert "`report.json`" in text


def test_every_table_has_units_in_its_headers_and_a_sentence_under_it():
    text = render.markdown(_report(400))
    tables = _tables(text)
    assert set(tables) >= {"Configuration", "Peak memory of one training step",
                           "What each variant holds", "Kept for backward, by part of the model",
                           "Held at the estimated peak, by part", "Training plans, fastest first",
                           "What the peak is made of"}
    names = {"variant", "part", "setting", "value", "plan", "fits", "x stock",
             "estimate / measured", "block"}
    for section, header in tables.items():
        for cell in header:
            assert cell in names or re.search(
                r"\((MiB|%|s|ms|images|pixels|x memory saving|per step)\)$", cell), (section, cell)
    # Under each table, after one blank line, a sentence.
    blocks = re.findall(r"\|\n\n([^|\n!#][^\n]*)", text)
    assert len(blocks) >= len(tables) and all(b.endswith(".") or b.endswith(")") for b in blocks)


def test_the_parts_tables_give_each_variants_mib_and_share():
    text = render.markdown(_report(600))
    row = next(line for line in text.splitlines() if line.startswith("| aspp |"))
    # _report spreads each variant's kept bytes evenly over the six parts.
    assert row == "| aspp | 100.0 | 16.7 | 50.0 | 16.7 |"


def test_the_words_are_explained_and_both_charts_linked():
    text = render.markdown(_report(400))
    for word in ("**Kept for backward**", "**Held at the peak**", "**backbone**",
                 "**loss_and_other**", "**Peak over base**"):
        assert word in text
    assert "(parts.png)" in text and "(parts_stacked.png)" in text
    assert text.count("## The words these tables use") == 1


def test_a_failed_variant_and_xla_are_noted_under_the_peaks():
    report = _report(400)
    report["failed"] = {"keras_remat_full": "custom_gradient: keywords"}
    report["config"]["jit_compile"] = True
    text = render.markdown(report)
    assert "- keras_remat_full did not run: custom_gradient: keywords" in text
    assert "jit_compile: the measured rows are XLA's" in text
    assert document.title(report) in text


def test_each_peak_is_decomposed_and_its_kinds_sum_to_the_estimate():
    text = render.markdown(_report(400))
    row = next(line for line in text.splitlines() if line.startswith("| stock | 1 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # weights 1, slots 1, measured base 3; kept 200, gradients 1, other 199, allocator 0:
    # 400 estimated, 400 measured.
    assert cells == ["stock", "1", "1", "3", "200", "1", "199", "0", "400", "400", "1.00"]


def test_the_sizes_table_says_what_was_measured_and_what_was_left():
    """(Before: a crop check stopped by the run limit showed as "crop None measured".)"""
    report = _report(400, frontier=False)
    report["max_sizes"] = {"budget_gb": 1.0, "variants": {"stock": {
        "max_batch": 123, "max_square_crop": 1409, "sizes_measured": False,
        "verified": {"max_batch": 128, "complete": False},
        "crop_verified": {"max_square_crop": None},
        "skipped": {"batch": {"129": {"reason": "run limit", "estimated_seconds": 24.2}},
                    "crop": {"1409": {"reason": "run limit", "estimated_seconds": 23.6}}}}}}
    text = render.markdown(report)
    assert ("| stock | 123 | 1409 | batch 128 fits, measured (larger not tried); batch 129 "
            "not checked (run limit); crop 1409 not checked (run limit) |") in text
    assert "None" not in text


def test_the_backbone_subtotal_heads_its_flows_in_both_tables_and_on_stdout():
    report = _report(600, frontier=False)
    for v in report["variants"].values():
        v["rollup"] = {"backbone": ["entry_flow", "middle_flow", "exit_flow"]}
        v["held_at_peak_bytes"] = {"weights": 3 * MIB, "optimizer_slots": 3 * MIB,
                                   "gradients": MIB, **v["peak_by_part_bytes"]}
    text = render.markdown(report)
    # _report gives each of the six parts 100 MiB (stock) and 50 MiB (memory saving).
    subtotal = "| backbone (entry_flow + middle_flow + exit_flow) | 300.0 | "
    kept, held = text.split("## Held at the estimated peak, by part")
    assert subtotal + "50.0 | 150.0 | 50.0 |" in kept
    rows = [line.split(" |")[0] for line in held.split("## The words")[0].splitlines()
            if line.startswith("| ") and not line.startswith(("| part", "| ---"))]
    assert rows == ["| weights", "| optimizer_slots", "| gradients",
                    "| backbone (entry_flow + middle_flow + exit_flow)", "| entry_flow",
                    "| middle_flow", "| exit_flow", "| aspp", "| decoder", "| loss_and_other"]
    assert subtotal + "49.4 | 150.0 | 48.9 |" in held  # of 607 MiB and 307 MiB
    table = render.table(report)
    for row in (r"backbone +50\.0% +50\.0%", r"  entry_flow +16\.7% +16\.7%",
                r"weights +3\.0 +3\.0", r"backbone +300\.0 +150\.0", r"  exit_flow +100\.0 +50\.0"):
        assert re.search(f"^{row}$", table, re.M), row


def _sizes(report, variant):
    report["max_sizes"] = {"budget_gb": 0.03, "variants": {"stock": variant}}
    return render.table(report), render.markdown(report)


def test_the_budget_is_named_in_gib_as_the_flag_gives_it():
    """(Before: "budget 0.03 GB" and "fits 0.03 GB", of a --memory_budget_gb in GiB.)"""
    printed, text = _sizes(_report(400, frontier=False),
                           {"max_batch": 3, "max_square_crop": 96, "sizes_measured": True})
    assert "largest sizes, budget 0.03 GiB at 64x64" in printed
    assert "fits 0.03 GiB less the device overhead" in text
    assert not re.search(r"\bGB\b", printed + text)


def test_sizes_that_no_check_measured_are_said_to_be_none_measured():
    """--report_verify_seconds=0: every size skipped, so none of the estimates was
    measured (before: "not all measured")."""
    skipped = {"batch": {3: {"reason": "too expensive", "estimated_seconds": 2.0}},
               "crop": {96: {"reason": "too expensive", "estimated_seconds": 2.0}}}
    none = {"max_batch": 3, "max_square_crop": 96, "sizes_measured": False, "skipped": skipped,
            "verified": {"max_batch": None, "total_bytes_by_batch": {}},
            "crop_verified": {"max_square_crop": None, "total_bytes_by_crop": {}}}
    assert "96 (estimates, none measured)" in _sizes(_report(400, frontier=False), none)[0]
    some = {**none, "verified": {"max_batch": 2, "total_bytes_by_batch": {3: 2**40, 2: 2**20}}}
    assert "96 (estimates, not all measured)" in _sizes(_report(400, frontier=False), some)[0]
    unchecked = {"max_batch": 3, "max_square_crop": 96, "sizes_measured": False}
    assert "96 (estimates, none measured)" in _sizes(_report(400, frontier=False), unchecked)[0]
