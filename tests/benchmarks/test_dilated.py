"""benchmarks/dilated.py: the depthwise conv's forms (TF's space-to-batch, the shifted
taps, a grouped conv, XLA) timed alone at ASPP's and the backbone's shapes; the dry run
at tiny shapes."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import dilated as bench  # noqa: E402  (beside benchmarks/gpu.py, not a package)


def test_the_dry_run_times_each_form_and_they_compute_one_gradient(tmp_path):
    out = tmp_path / "dilated.jsonl"
    summary = bench.main(["--cpu", "--steps", "1", "--out", str(out)])
    assert [(r["shape"], r["rate"]) for r in summary["rows"]] == [
        (label, rate) for label, _, rates in bench.CPU_SHAPES for rate in rates]
    assert {r["rate"] for r in summary["rows"]} >= {1, 2}
    for row in summary["rows"]:
        # The taps are the dilated twin's only.
        assert set(row["forms"]) == set(bench.FORMS) - ({"taps"} if row["rate"] == 1 else set())
        timed = {f: r for f, r in row["forms"].items() if "error" not in r}
        assert all(r["seconds"] > 0 for r in timed.values())
        assert set(timed) >= set(row["forms"]) - {"grouped"}
        # The grouped conv has a gradient kernel on a GPU and with oneDNN on a CPU; this
        # suite runs TF's own CPU kernels, which refuse it in one line.
        if "grouped" not in timed:
            assert "CPU" in row["forms"]["grouped"]["error"] or "filter" in row["forms"][
                "grouped"]["error"], row["forms"]["grouped"]
        # Every form computes TF's conv: input and kernel gradients agree.
        assert set(row["grad_difference"]) == set(timed)
        assert max(row["grad_difference"].values()) < 1e-5
        assert row["copy_ratio"] > 1.0
    assert out.read_text().count("\n") == 1


def test_the_taps_threshold_is_per_device_type():
    import keras

    from tfseg.layers import dilated

    layer = keras.layers.DepthwiseConv2D(3, dilation_rate=18, padding="same")
    # ASPP's rate 18 at 33x33: TF's copy is 72x72, 4.8x the input.
    assert dilated.usable(layer, (2, 33, 33, 8), min_copy_ratio=4.0)
    assert not dilated.usable(layer, (2, 33, 33, 8), min_copy_ratio=5.0)
    assert dilated.device_type() in dilated.MIN_COPY_RATIO
    assert dilated.usable(layer, (2, 33, 33, 8)) == (
        dilated.copy_ratio((33, 33), (3, 3), (18, 18), "same")
        >= dilated.MIN_COPY_RATIO[dilated.device_type()])


@pytest.mark.parametrize("argv", [["--forms", "winograd"], ["--steps", "0"]])
def test_bad_arguments_are_one_line_and_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.parse(argv)
    assert exit_.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_with_onednn_the_grouped_conv_computes_the_depthwise_conv(tmp_path):
    """A process of its own: oneDNN is chosen when TensorFlow loads (the suite's is off)."""
    out = tmp_path / "dilated.jsonl"
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1", TF_CPP_MIN_LOG_LEVEL="2")
    subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "dilated.py"), "--cpu",
                    "--steps", "1", "--forms", "space_to_batch,grouped", "--out", str(out)],
                   env=env, check=True, capture_output=True, timeout=300)
    rows = json.loads(out.read_text())["rows"]
    assert {r["rate"] for r in rows} >= {1, 2, 3}
    for row in rows:
        assert row["forms"]["grouped"]["seconds"] > 0, row
        assert row["grad_difference"]["grouped"] < 1e-5, row
