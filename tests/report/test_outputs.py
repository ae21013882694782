"""The report's files written whole (``render.write``): replaced together, the folder's
other files left alone, the previous report kept when a write fails or a SIGTERM lands in
it (a real process, signalled once report.json is written, before the charts)."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.report.test_frontier import _frontier
from tfseg.io.outputs import STAGING_PREFIX
from tfseg.report import render
from tfseg.units import MIB

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARTS = ("entry_flow", "middle_flow", "exit_flow", "aspp", "decoder", "loss_and_other")


def _report(peak_mib, frontier=True):
    """A report as ``tfseg.report.run`` returns it, of two variants (what render reads)."""
    def variant(peak):
        return {"recompute_blocks": [], "measured_peak_bytes": peak * MIB,
                "measured_peak_max_bytes": peak * MIB, "measured_peak_by_process_bytes":
                [peak * MIB] * 3, "ratio_to_stock": peak / peak_mib,
                "static_estimate_bytes": peak * MIB, "estimate_ratio": 1.0,
                "step_seconds": 0.5,
                "accounted": {"parameter_bytes": MIB, "gradient_bytes": MIB,
                              "optimizer_slot_bytes": MIB, "activation_bytes": peak * MIB,
                              "per_sample_activation_bytes": peak * MIB // 8},
                "breakdown_percent": {p: 100 / len(PARTS) for p in PARTS},
                "peak_by_part_bytes": {p: peak * MIB // len(PARTS) for p in PARTS},
                "peak_by_kind_bytes": {"kept_for_backward": peak * MIB // 2,
                                       "gradients": MIB, "other": peak * MIB // 2 - MIB,
                                       "allocator": 0},
                "base_bytes": 3 * MIB,
                "kept_by_part_bytes": {p: peak * MIB // len(PARTS) for p in PARTS}}

    report = {"config": {"jit_compile": False, "height": 64, "width": 64}, "device": "CPU:0",
              "variants": {"stock": variant(peak_mib), "memory_saving": variant(peak_mib // 2)}}
    if frontier:
        report["frontier"] = _frontier()
    return report


def _files(folder):
    return {name: hashlib.sha1((folder / name).read_bytes()).hexdigest()
            for name in sorted(os.listdir(folder))}


def test_a_report_replaces_its_files_together_and_leaves_the_folders_others(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    render.write(_report(400), str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["frontier.png", "notes.txt", "parts.png",
                                            "parts_stacked.png", "report.json", "report.md"]
    render.write(_report(300, frontier=False), str(tmp_path))
    # The older report's frontier chart is not left beside a report without one.
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "parts.png", "parts_stacked.png",
                                            "report.json", "report.md"]
    assert json.loads((tmp_path / "report.json").read_text())["variants"]["stock"][
        "measured_peak_bytes"] == 300 * MIB
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_failure_while_writing_keeps_the_previous_report(tmp_path, monkeypatch):
    """(Before: the new report.json and report.md beside the old chart.)"""
    render.write(_report(400), str(tmp_path))
    before = _files(tmp_path)

    def chart(report, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(render, "chart", chart)
    with pytest.raises(OSError):
        render.write(_report(300), str(tmp_path))
    assert _files(tmp_path) == before


WRITE = ("import json, sys\n"
         "from tfseg.report import render\n"
         "render.write(json.load(open(sys.argv[1])), sys.argv[2])\n"
         "print('written')\n")


@pytest.mark.slow
def test_sigterm_while_a_report_is_written_keeps_the_previous_one(tmp_path):
    """SIGTERM once the new report.json is written, while the charts are drawn: the
    process ends with the signal, the previous report as it was, no staging folder.
    (Before: the new report.json beside the old charts.)"""
    out = tmp_path / "report"
    render.write(_report(400), str(out))
    before = _files(out)
    (tmp_path / "new.json").write_text(json.dumps(_report(300)))
    start = time.time()
    proc = subprocess.Popen([sys.executable, "-c", WRITE, str(tmp_path / "new.json"), str(out)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    try:
        while proc.poll() is None:
            written = [os.path.join(folder, "report.json") for folder, _, files in os.walk(out)
                       if "report.json" in files]
            if any(os.path.getmtime(path) >= start for path in written if os.path.exists(path)):
                proc.send_signal(signal.SIGTERM)
                break
            time.sleep(0.002)
        output = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGTERM, output[-2000:]
    assert _files(out) == before
    assert not any(STAGING_PREFIX in path for path, _, _ in os.walk(tmp_path))


def test_the_device_line_names_the_device_overhead_and_where_it_comes_from():
    report = _report(400, frontier=False)
    assert "(device: CPU:0)" in render.table(report)  # a report written before the record
    report["device_overhead"] = {"device": "GPU:0", "overhead_bytes": 600 * MIB,
                                 "overhead_source": "measured (NVML)"}
    assert "(device: CPU:0, device overhead 600 MiB: measured (NVML))" in render.table(report)
    report["device_overhead"].update(overhead_bytes=None, overhead_source="not measured: x")
    assert "device overhead ? MiB: not measured: x)" in render.table(report)
