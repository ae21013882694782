"""benchmarks/gpu_table.py: the CPU figure beside each GPU row is read from
docs/benchmarks.md's tables (the one place figures are kept), never copied into code."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import gpu_table  # noqa: E402  (beside benchmarks/gpu.py, not a package)

PAGE = """# Benchmarks

## Training step memory, 513x513, batch 2

`python benchmarks/memory.py --repeats 3` (2026-12-01; 21 classes):

| variant | peak over base | x stock | step | x stock | target |
| --- | --- | --- | --- | --- | --- |
| stock | 3,000 MiB | 1.00 | 8.00 s | 1.00 | |
| memory saving | 1,000 MiB | **0.33** | 8.50 s | **1.06** | |

## Full Cityscapes resolution, 1024x2048, batch 1

`python benchmarks/memory.py --full_resolution` (2026-12-02):

| variant | base | peak over base | total | target |
| --- | --- | --- | --- | --- |
| memory saving | 300 MiB | 4,100 MiB | 4.40 GB | |

Static estimates: `python benchmarks/memory.py --full_resolution --static` (2026-12-03):

| variant | base | estimated peak over base | total | target |
| --- | --- | --- | --- | --- |
| memory saving, fp32 | 300 MiB | 4,000 MiB | 4.30 GB | |
| recompute, `mixed_bfloat16` | 300 MiB | 1,900 MiB | 2.20 GB | |
"""


def test_the_figures_follow_the_page_they_are_read_from(tmp_path):
    page = tmp_path / "benchmarks.md"
    page.write_text(PAGE)
    figures = gpu_table.cpu_figures(str(page))
    assert figures == {
        ("513x513 b2", "stock"): (3000, 8.0, "CPU, 2026-12-01"),
        ("513x513 b2", "memory_saving"): (1000, 8.5, "CPU, 2026-12-01"),
        ("1024x2048 b1", "memory_saving"): (4100, None, "CPU, 2026-12-02"),
        ("1024x2048 b1", "recompute_bf16"): (1900, None, "CPU static estimate, 2026-12-03"),
    }
    assert (gpu_table.cpu_figure("513x513 b2", "stock", figures)
            == "3,000 MiB, 8.00 s (CPU, 2026-12-01)")
    assert gpu_table.cpu_figure("513x513 b2", "recompute", figures) == "-"  # no such row
    page.write_text(PAGE.replace("| stock | 3,000 MiB", "| stock | 3,100 MiB"))
    assert gpu_table.cpu_figures(str(page))[("513x513 b2", "stock")][0] == 3100
    assert gpu_table.cpu_figures(str(tmp_path / "absent.md")) == {}


def test_every_source_row_is_in_the_docs_and_the_table_shows_it():
    with open(gpu_table.DOCS, encoding="utf-8") as f:
        text = f.read()
    figures = gpu_table.cpu_figures()
    # A renamed section or row would silently leave "-" beside the GPU's row.
    assert set(figures) == set(gpu_table.SOURCES)
    for key, (peak, _, what) in figures.items():
        assert f"| {gpu_table.SOURCES[key][1]} |" in text and f"{peak:,} MiB" in text, key
        assert what.startswith("CPU") and gpu_table._DATE.search(what), (key, what)
    assert figures[("513x513 b2", "memory_saving")][0] < figures[("513x513 b2", "stock")][0]
    mib = gpu_table.MIB
    row = {"size": "513x513 b2", "name": "stock", "runs": [{}],
           "result": {"base_bytes": 300 * mib, "peak_over_base_bytes": 3000 * mib,
                      "step_seconds": 0.1, "gpu_utilisation_percent": 50}}
    line = gpu_table.row_line(row, row, figures)
    assert line.endswith(f"| {gpu_table.cpu_figure('513x513 b2', 'stock')} |")
    assert "MiB" in line.rsplit("|", 2)[-2]


@pytest.mark.parametrize("size,name", [("1024x2048 b1", "stock"), ("513x513 b2", "stock_bf16")])
def test_a_row_the_docs_do_not_give_shows_a_dash(size, name):
    assert gpu_table.cpu_figure(size, name) == "-"


def test_a_profiled_row_says_where_its_time_went():
    profile = {"wall_seconds": 0.2,
               "device": {"busy_seconds": 0.15, "kernels": 9000,
                          "by_type": [["DepthwiseConv2dNativeBackpropFilter", 0.06, 60],
                                      ["Conv2D", 0.04, 300]]},
               "host": {"ops": 14000, "op_seconds": 0.18,
                        "by_type": [["Conv2D", 0.02, 300], ["Mul", 0.03, 2000]]}}
    row = {"size": "1024x2048 b1", "name": "memory_saving", "result": {"profile": profile}}
    lines = gpu_table.profile_lines(row)
    assert "kernels fill 0.150 s of it, 75%, in 9,000 kernels" in lines[1]
    assert "host's ops take 0.180 s over 14,000 ops" in lines[1]
    # By the device's order; the host's time beside it where the host has the type.
    assert lines[-2:] == ["| DepthwiseConv2dNativeBackpropFilter | 0.0600 | 60 | - | - |",
                          "| Conv2D | 0.0400 | 300 | 0.0200 | 300 |"]
    assert gpu_table.profile_lines({"size": "s", "name": "n", "result": {}}) == []
