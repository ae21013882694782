"""benchmarks/dilated.py: the dilated depthwise conv's forms (TF's space-to-batch, the
shifted taps, XLA) timed alone at ASPP's shapes; the dry run at tiny shapes."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import dilated as bench  # noqa: E402  (beside benchmarks/gpu.py, not a package)


def test_the_dry_run_times_each_form_and_they_compute_one_gradient(tmp_path):
    out = tmp_path / "dilated.jsonl"
    summary = bench.main(["--cpu", "--steps", "1", "--out", str(out)])
    assert [(r["shape"], r["rate"]) for r in summary["rows"]] == [
        (label, rate) for label, *_ in bench.CPU_SHAPES for rate in bench.CPU_RATES]
    for row in summary["rows"]:
        assert set(row["forms"]) == set(bench.FORMS)
        assert all(r["seconds"] > 0 for r in row["forms"].values())
        # The taps and XLA compute TF's dilated conv: input and kernel gradients agree.
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
