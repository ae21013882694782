"""A report's clock (``tfseg.report.progress``): its time bound, its progress lines and its
stop request; and the report it bounds: past the bound it writes estimates marked
unverified, and a SIGTERM while it verifies writes what it has, marked partial, and
exits 143 at once with no measuring process left (real processes)."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.command import MAIN, ROOT, alive, children, main_env
from tfseg.profile.measure import Stopped
from tfseg.report.progress import Clock, duration
from tfseg.runtime.signals import StopRequest

# The tiny default model (tests/train/conftest.py's size) with a budget: one variant,
# one process, the frontier's estimates and the size verifications.
BUDGET_FLAGS = ("--mode=report", "--width_multiplier=0.25", "--middle_repeats=1",
                "--crop_size=64,64", "--batch_size=2", "--report_repeats=1",
                "--report_variants=stock", "--memory_budget_gb=0.2")


class _Time:
    """A clock the test moves by hand."""

    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_the_clock_announces_its_plan_and_counts_down_the_runs_left():
    lines, now = [], _Time()
    clock = Clock(max_minutes=10, log=lines.append, now=now)
    clock.plan("verifying", {"stock": [30.0, 30.0, 12.0], "recompute": [100.0]})
    assert lines[-1] == ("verifying: 4 runs planned, about 3 min; bounded at 10 min, "
                         "10 min of it left")
    clock.done("stock")
    assert lines[-1] == "1/4 measured, about 2 min left"
    clock.finish("stock")  # its sizes settled: its two other runs are not made
    assert lines[-1] == "1/4 measured, about 2 min left"
    clock.done("recompute")
    assert lines[-1] == "2/2 measured, about 0 s left"
    assert duration(40) == "40 s" and duration(600) == "10 min"


def test_past_the_bound_no_run_starts_and_none_after_it():
    now = _Time()
    clock = Clock(max_minutes=1, log=lambda line: None, now=now)
    assert clock.allows(50.0) and not clock.bound_reached
    assert not clock.allows(61.0)  # would end past the bound
    assert clock.bound_reached and not clock.allows(0.0)  # reached: nothing more starts
    assert Clock(max_minutes=None, now=now).allows(1e9)  # no bound
    lines = []
    late = Clock(max_minutes=1, log=lines.append, now=now)
    now.t += 120
    late.plan("verifying", {"stock": [10.0]})
    assert lines == ["verifying: 1 runs planned, about 10 s; the bound of 1 min is passed: "
                     "none will start"]


def test_a_stop_request_raises_stopped_between_runs():
    stop = StopRequest()
    clock = Clock(max_minutes=None, stop=stop, log=lambda line: None)
    clock.check()
    stop._handle(signal.SIGTERM, None)
    with pytest.raises(Stopped):
        clock.allows(1.0)


def test_sizes_past_the_bound_are_the_fits_predictions_marked_unverified():
    from tests.report.test_report import _measured
    from tfseg.profile.step import StepConfig
    from tfseg.report import ReportConfig, max_sizes, render

    # Budget 2700: batch 5 and crop 209 predicted (tests/report/test_report.py), each
    # run estimated at ~13 s: past a bound of 6 s, none starts.
    config = ReportConfig(step=StepConfig.of(height=97, width=97, batch=2, timed_steps=0),
                          memory_budget_gb=2700 / 2**30)
    lines = []
    clock = Clock(max_minutes=0.1, log=lines.append, now=_Time())
    sizes = max_sizes(config, {"stock": _measured()}, lines.append, clock)
    assert lines[0].startswith("verifying the largest batch and crop under the budget: 3 runs "
                               "planned, about 39 s; bounded at 0.1 min")
    stock = sizes["variants"]["stock"]
    assert (stock["max_batch"], stock["max_square_crop"]) == (5, 209)  # the predictions
    assert stock["sizes_measured"] is False and stock["verification_runs"] == 0
    assert stock["skipped"] == {"batch": {5: {"reason": "time bound", "estimated_seconds": 13.0}},
                                "crop": {209: {"reason": "time bound",
                                               "estimated_seconds": 12.4}}}
    report = {"config": {"height": 100, "width": 100, "jit_compile": False}, "device": "CPU:0",
              "variants": {}, "max_sizes": sizes, "time_bound_reached": clock.bound_reached}
    assert re.search(r"predicted max batch +5, square crop at batch 1 +209 \(estimates, none "
                     r"measured\)", render.table(report))  # no run started
    assert render.caveats(report)[0].startswith("**Time bound reached**")


def _run(*args, timeout=600):
    return subprocess.run([sys.executable, MAIN, *args], cwd=ROOT, env=main_env(),
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.full  # run with -m full: .ci/run keeps to 40 minutes
@pytest.mark.xdist_group("measure")
@pytest.mark.timeout(600)
def test_past_its_time_bound_the_report_gives_estimates_marked_unverified(tmp_path):
    out = tmp_path / "report"
    proc = _run(*BUDGET_FLAGS, f"--model_dir={tmp_path / 'run'}", f"--report_dir={out}",
                "--report_max_minutes=0.01")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert re.search(r"report: 1 variant \(stock\), 1 fresh process each; then for the "
                     r"0.2 GiB budget.*bounded at 0.01 min", proc.stdout), proc.stdout[-2000:]
    assert re.search(r"verifying the largest batch and crop under the budget: \d+ runs "
                     r"planned, about", proc.stdout), proc.stdout[-2000:]
    assert "verifying stock at" not in proc.stdout  # no verification run started
    result = json.loads((out / "report.json").read_text())
    assert result["time_bound_reached"] is True and "partial" not in result
    sizes = result["max_sizes"]["variants"]["stock"]
    assert sizes["sizes_measured"] is False and sizes["verification_runs"] == 0
    assert sizes["max_batch"] >= 1  # the prediction is there
    reasons = {why["reason"] for kind in sizes["skipped"].values() for why in kind.values()}
    assert reasons == {"time bound"}
    assert all(p["predicted_bytes"] for p in result["frontier"]["points"])  # estimated
    assert "Time bound reached" in (out / "report.md").read_text()


@pytest.mark.slow
@pytest.mark.xdist_group("measure")
@pytest.mark.timeout(600)
def test_a_sigterm_while_verifying_writes_the_report_so_far_marked_partial(tmp_path):
    out = tmp_path / "report"
    # No frontier: its estimates would come first and take minutes.
    proc = subprocess.Popen([sys.executable, MAIN, *BUDGET_FLAGS, f"--report_dir={out}",
                             f"--model_dir={tmp_path / 'run'}", "--report_max_minutes=0",
                             "--report_frontier=false"],
                            cwd=ROOT, env=main_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        seen, deadline = "", time.time() + 480
        while not re.search(r"verifying stock at", seen) and time.time() < deadline:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, seen[-3000:]
            seen += line
        assert re.search(r"verifying stock at", seen), seen[-3000:]
        deadline = time.time() + 30
        while not children(proc.pid) and time.time() < deadline:
            time.sleep(0.05)
        kids = children(proc.pid)
        assert kids, "no measuring process"
        proc.send_signal(signal.SIGTERM)
        after = proc.communicate(timeout=120)[0]
        output = seen + after
        assert proc.returncode == 128 + signal.SIGTERM, output[-2000:]
        # What ran, in order: the checks planned, the first started, the stop. The check
        # under way was killed, not waited for (no "1/N measured" after it), and none
        # started after it: the report wrote its charts, not the verifications.
        started = re.findall(r"^verifying stock at .*$", output, re.M)
        assert len(started) == 1, output[-2000:]
        plan = re.search(r"^verifying the largest batch and crop under the budget: (\d+) runs",
                         output, re.M)
        assert plan and int(plan.group(1)) > 1 and plan.start() < output.index(started[0])
        assert not re.search(r"^\d+/\d+ measured", after, re.M), after[-2000:]
        assert "Traceback" not in output
        assert "(partial: stopped)" in after
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.time() + 5
    while any(map(alive, kids)) and time.time() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in kids if alive(pid)], "a measuring process outlived it"
    result = json.loads((out / "report.json").read_text())
    assert result["partial"] == {"signal": "SIGTERM", "missing": ["size verification"]}
    assert "stock" in result["variants"] and "frontier" not in result
    assert result["max_sizes"]["variants"]["stock"]["sizes_measured"] is False
    assert "Partial report" in (out / "report.md").read_text()
    assert sorted(os.listdir(out)) == ["parts.png", "parts_stacked.png", "report.json",
                                       "report.md"]


def test_a_report_folder_it_cannot_write_is_refused_before_measuring(tmp_path):
    from tests.command import run
    from tests.io.test_outputs import UNWRITABLE, _unwritable

    if not _unwritable():
        pytest.skip(f"{UNWRITABLE} is writable here")
    proc = run(*BUDGET_FLAGS, f"--model_dir={tmp_path / 'run'}",
               f"--report_dir={UNWRITABLE}/tfseg-report")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    # "Permission denied", or "Read-only file system" where sysfs is mounted read-only.
    assert lines[0].startswith(f"tfseg: error: --report_dir: cannot write in {UNWRITABLE}: ")
    assert "measur" not in proc.stdout  # it stopped before the first measurement
