"""benchmarks/gpu_loop.py: refuses in one line without a GPU, and its --cpu dry run
writes the synthetic set, runs `main.py --mode=train` twice and measures each run from
its TensorBoard events, so that its first GPU run cannot fail for a reason a CPU shows."""

import json
import os
import subprocess
import sys

import pytest

from tfseg.runtime import device

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "gpu_loop.py")


def _run(*args, timeout=900, env=None):
    env = env or dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(device.name() != "CPU:0", reason="refuses only where there is no GPU")
def test_without_a_gpu_it_exits_2_in_one_line_that_says_why(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS")}
    proc = _run("--out", str(tmp_path / "out.jsonl"), env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"benchmarks/gpu_loop.py: no GPU here, {device.describe()}; --cpu runs every piece "
        f"at tiny shapes on the CPU"], proc.stderr
    assert proc.stdout == "" and not (tmp_path / "out.jsonl").exists()


def test_a_bad_argument_is_one_line_and_exit_2():
    proc = _run("--cpu", "--step_seconds", "fullres")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "benchmarks/gpu_loop.py: --step_seconds takes NAME=SECONDS, --size HxW"]


@pytest.mark.full  # run with -m full: .ci/run keeps to 40 minutes
@pytest.mark.xdist_group("measure")
@pytest.mark.timeout(900)  # the set written once, then two fresh training processes
def test_the_cpu_dry_run_trains_twice_and_measures_each_run(tmp_path):
    out = tmp_path / "loop.jsonl"
    (out).write_text('{"earlier": true}\n')  # appended to, never replaced
    proc = _run("--cpu", "--images", "5", "--size", "65x97", "--processes", "2",
                "--data_dir", str(tmp_path / "data"), "--out", str(out),
                "--step_seconds", "fullres=0.5")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [json.loads(line) for line in out.read_text().splitlines()] == [
        {"earlier": True}] + lines
    assert [r["run"] for r in lines] == ["fullres", "crop769"]
    # The set: 5 train images over 2 writers' cities, each with its label file.
    images = sorted((tmp_path / "data" / "leftImg8bit" / "train").glob("*/*_leftImg8bit.png"))
    labels = sorted((tmp_path / "data" / "gtFine" / "train").glob("*/*_gtFine_labelIds.png"))
    assert len(images) == len(labels) == 5
    assert {p.parent.name for p in images} >= {"p00_synth0", "p01_synth0"}
    for r, batch in zip(lines, (1, 2)):
        assert "error" not in r and r["exit"] == 0 and r["dry_run"], r
        assert r["batch"] == batch and r["steps"] == 6 and r["skip"] == 2
        # Logged every step from step 2: steps 2..6, four counted.
        assert r["counted_steps"] == 4 and r["counted_seconds"] > 0
        assert r["images_per_s"] > 0 and r["progress_images_per_s"] > 0
        assert r["loss"] > 0 and r["last_line"].startswith("step 6/6")
        assert r["gpu_busy_percent"] is None and r["gpu_samples"] == 0  # no GPU
        assert r["cpu_source"] in ("psutil", "proc")
        assert 0 < r["cpu_process_percent"] and 0 < r["cpu_machine_percent"] <= 100.0
        assert "--width_multiplier=0.125" in r["command"] and "--mode=train" in r["command"]
        assert r["data"]["images"] == 5 and r["data"]["size"] == [65, 97]
    fullres = lines[0]
    assert fullres["crop"] == [65, 97]  # fullres crops the whole image
    assert fullres["step_images_per_s"] == 2.0
    assert fullres["loop_over_step"] == pytest.approx(fullres["images_per_s"] / 2.0)
    assert "step_seconds" not in lines[1]

