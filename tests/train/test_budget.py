"""main.py --mode=train --memory_budget_gb: the run trains the plan that fits, says so in
one line, and records it in its config.json; bad combinations are one line, exit 2."""

import json
import os

import pytest

from tests.train.conftest import TINY_FLAGS, run_main


@pytest.mark.slow
@pytest.mark.timeout(600)  # over the suite's 300 s per test on a busy machine
def test_a_budget_trains_the_chosen_plan_records_it_and_keeps_it_on_resume(data_dir, tmp_path):
    model_dir = tmp_path / "run"
    # Mirrored: the plan is one replica's step (on this CPU, the only replica).
    flags = ("--memory_budget_gb=50", "--device_overhead_gb=0.5", "--strategy=mirrored")
    proc = run_main("--mode=train", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
                    "--train_steps=1", *flags, *TINY_FLAGS,
                    timeout=600)  # two estimates in fresh processes, then a step
    # 50 GiB fits stock, the fastest plan: chosen after estimating memory saving (the
    # segments' costs) and stock, nothing more.
    line = next(text for text in proc.stdout.splitlines() if text.startswith("memory plan:"))
    assert line.startswith("memory plan: stock: predicted ")
    assert " per replica (batch 2 of 2 on 1) of " in line
    assert line.endswith("of 49.5 GiB (budget 50 GiB - device overhead 0.5 GiB)")
    saved = json.load(open(os.path.join(model_dir, "config.json")))
    plan = saved["memory_plan"]
    assert plan["plan"]["name"] == "stock" and plan["overhead_bytes"] == 2**29
    assert saved["model"]["memory_saving"] is False and saved["model"]["recompute"] == []
    points = {p["name"]: p for p in plan["frontier"]}
    assert [p["name"] for p in plan["frontier"]][:3] == ["stock", "memory_saving", "+entry_stem"]
    estimated = {name for name, p in points.items() if p["predicted_bytes"] is not None}
    assert estimated == {"stock", "memory_saving"}
    assert points["memory_saving"]["predicted_bytes"] < points["stock"]["predicted_bytes"]
    assert os.path.exists(os.path.join(model_dir, "ckpt-1.index"))

    # Resumed for longer: the plan saved for these settings is kept, not made again.
    proc = run_main("--mode=train", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
                    "--train_steps=2", *flags, *TINY_FLAGS)
    assert "memory plan: the one in config.json, made for these settings" in proc.stdout
    assert "estimating" not in proc.stdout and line in proc.stdout
    assert "resumed from" in proc.stdout
    assert os.path.exists(os.path.join(model_dir, "ckpt-2.index"))
    assert json.load(open(os.path.join(model_dir, "config.json")))["memory_plan"] == plan


@pytest.mark.parametrize("flags, message", [
    (("--recompute=middle",), "--recompute: --memory_budget_gb chooses --memory_saving and "
                              "--recompute itself; give either the budget or them"),
    (("--strategy=multi_worker",), "--memory_budget_gb: plans the replicas of this host; "
                                   "with --strategy=multi_worker"),
])
def test_a_budget_with_conflicting_flags_is_one_line(data_dir, tmp_path, flags, message):
    proc = run_main("--mode=train", f"--data_dir={data_dir}", f"--model_dir={tmp_path}",
                    "--memory_budget_gb=8", *TINY_FLAGS, *flags, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith(f"tfseg: error: {message}")
    assert not os.path.exists(os.path.join(tmp_path, "config.json"))


@pytest.mark.slow
def test_a_stop_while_planning_ends_the_run_and_its_measuring_process_at_once(
        data_dir, tmp_path):
    """SIGTERM while the budget planner measures in a child process: the child is killed
    and the run exits 143 after the estimate under way, none after it (not after the
    remaining estimates), with no checkpoint and no config.json written."""
    import signal
    import time

    from tests.command import alive, children
    from tests.train.conftest import start_main, wait_for

    model_dir = tmp_path / "run"
    proc = start_main("--mode=train", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
                      "--train_steps=1", "--memory_budget_gb=50", *TINY_FLAGS)
    before = wait_for(proc, r"estimating ")
    time.sleep(1)  # the measuring child is up
    kids = children(proc.pid)
    assert kids, "no measuring process"
    proc.send_signal(signal.SIGTERM)
    after = proc.communicate(timeout=60)[0]
    output = before + after
    assert proc.returncode == 128 + signal.SIGTERM, output[-2000:]
    # What ran, in order: the first estimate (memory saving's, whose segments make the
    # frontier), then the stop. Nothing after it: no frontier, no other plan estimated,
    # no plan chosen, no step.
    lines = [line for line in output.splitlines() if line.strip()]
    planning = [line for line in lines if line.startswith(("estimating", "memory plan",
                                                           "SIGTERM"))]
    assert planning == ["estimating memory saving ...",
                        "SIGTERM: memory planning stopped; nothing written"], output[-2000:]
    assert lines[-1] == planning[-1], output[-2000:]
    assert not [line for line in lines if "plans on the frontier" in line
                or line.startswith("step ")], output[-2000:]
    assert "Traceback" not in output
    deadline = time.time() + 5  # a bound on the wait only: the kill has been sent
    while any(map(alive, kids)) and time.time() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in kids if alive(pid)]
    assert not (model_dir / "config.json").exists()
    assert not [name for name in os.listdir(model_dir) if name.startswith("ckpt-")] \
        if model_dir.exists() else True
