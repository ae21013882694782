"""benchmarks/gpu.py: refuses in one line without a GPU, and its --cpu dry run runs every
piece (parity, the step rows, the layout optimizer A/B, the overhead, the table) at tiny
shapes, so that its first GPU run cannot fail for a reason a CPU shows."""

import argparse
import json
import os
import subprocess
import sys

import pytest

from tfseg.runtime import device

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "gpu.py")
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import gpu_table  # noqa: E402  (beside benchmarks/gpu.py, not a package)


def _run(*args, timeout=1200, env=None):
    env = env or dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(device.name() != "CPU:0", reason="refuses only where there is no GPU")
def test_without_a_gpu_it_exits_2_in_one_line_that_says_why():
    # The user's environment, where TensorFlow's start-up lines would come first.
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS")}
    proc = _run(env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"benchmarks/gpu.py: no GPU here, {device.describe()}; --cpu runs every piece at "
        f"tiny shapes on the CPU"], proc.stderr


@pytest.mark.full  # run with -m full: .ci/run keeps to 40 minutes
@pytest.mark.xdist_group("measure")
@pytest.mark.timeout(1500)  # seven fresh processes, each building and tracing a DeepLab
def test_the_cpu_dry_run_runs_every_piece_and_writes_the_table(tmp_path):
    proc = _run("--cpu", "--repeats", "1", "--profile", "--out_dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "gpu.json").read_text())
    assert summary == json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["dry_run"] and summary["overhead"]["bytes"] == 0
    # Parity: float64 exact up to rounding; float32 within batch-norm reordering noise.
    assert [p["dtype"] for p in summary["parity"]] == ["float64", "float32"]
    for p in summary["parity"]:
        assert "error" not in p, p
        limit = 1e-9 if p["dtype"] == "float64" else 5e-2
        assert max(p["relative_error"].values()) < limit, p
    rows = {(r["size"], r["name"]): r for r in summary["rows"]}
    # Each kind of row once: the fp32 variants, the layout optimizer off, bf16.
    assert {("513x513 b2", "stock"), ("513x513 b2", "memory_saving"), ("513x513 b2", "recompute"),
            ("513x513 b2", "memory_saving_layout_off"),
            ("1024x2048 b1", "recompute_bf16"),
            ("513x513 b2", "memory_saving_fused_norm=false")} <= set(rows)
    for key, row in rows.items():
        assert "error" not in row, (key, row["error"])
        result = row["result"]
        assert result["device"] == "CPU:0" and result["peak_over_base_bytes"] > 0, key
        assert result["gpu_utilisation_percent"] is None  # no NVML on the CPU
        # One more step under the profiler: the host's op time by type, no GPU plane
        # (under XLA the step is one compiled cluster).
        profile = result["profile"]
        assert profile["device"] is None, key
        assert profile["host"]["ops"] >= (1 if key[1].endswith("_xla") else 100), key
        assert 0 < profile["host"]["op_seconds"] <= 2 * profile["wall_seconds"], key
    stock, saving = rows[("513x513 b2", "stock")], rows[("513x513 b2", "memory_saving")]
    assert saving["result"]["peak_over_base_bytes"] < stock["result"]["peak_over_base_bytes"]
    table = (tmp_path / "gpu.md").read_text()
    assert "| 513x513 b2 | memory_saving |" in table and "PaddlePaddle" in table
    assert "**Where the time goes, 513x513 b2 memory_saving**" in table
    # docs/benchmarks.md's CPU figure beside stock's row, whatever it is today.
    assert gpu_table.cpu_figure("513x513 b2", "stock") in table


def test_rows_and_parity_choose_the_measurements_in_the_order_given():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import gpu

    args = argparse.Namespace(cpu=False, rows=None, parity=None, timed_steps=5,
                                  norm_setting="fused_norm")
    every = [(size, name) for size, name, *_ in gpu.rows(args)]
    assert ("1024x2048 b1", "memory_saving_bf16") in every and len(every) == 28
    assert ("1024x2048 b1", "memory_saving_bf16_blocks") in every
    assert ("513x513 b2", "stock_blocks") in every
    assert ("1024x2048 b1", "memory_saving_grouped") in every
    assert ("1024x2048 b1", "memory_saving_bf16_layout_off") in every
    # The network of docs/benchmarks.md's CPU column: the full Xception-65, not the
    # synthetic default (the first H100 run measured that by mistake).
    from tfseg.profile.step import StepConfig

    for _, name, step, *_ in gpu.rows(args):
        config = StepConfig.from_json(step)
        assert (config.run.model.width_multiplier, config.run.model.middle_repeats,
                config.num_classes) == (1.0, 16, 21)
        # The whole step by XLA, or each block (tfseg.xla.Blocks).
        assert config.run.run.jit_compile == (
            "step" if name.endswith("_xla") else "blocks" if "_blocks" in name else "off")
    # XLA's command buffers: a row of its own, its flags after the device's.
    found = {name: env for _, name, _, _, env in gpu.rows(args)}
    assert found["memory_saving_blocks_cmdbuf"] == {"XLA_FLAGS": gpu.COMMAND_BUFFERS}
    assert gpu._with_xla_flags({}) == {}
    os.environ["XLA_FLAGS"] = "--xla_dump_to=/tmp/x"
    try:
        assert gpu._with_xla_flags({"XLA_FLAGS": "--a"}) == {
            "XLA_FLAGS": "--xla_dump_to=/tmp/x --a"}
    finally:
        del os.environ["XLA_FLAGS"]
    args.rows = ["1024x2048 b1:recompute", "stock"]
    chosen = [(size, name) for size, name, *_ in gpu.rows(args)]
    assert chosen == [("1024x2048 b1", "recompute"), ("513x513 b2", "stock"),
                      ("1024x2048 b1", "stock")]
    args.rows = []  # `--rows` with none: the parity checks alone (speed_set's parity stage)
    assert gpu.rows(args) == []
    assert [s["dtype"] for s, _ in gpu.parity_specs(args)] == ["float64", "float32", "float32"]
    args.parity = ["float32_tf32_off"]
    assert gpu.parity_specs(args) == [({"dtype": "float32", "size": [129, 193],
                                        "width_multiplier": 0.5, "middle_repeats": 4},
                                       {"NVIDIA_TF32_OVERRIDE": "0"})]
