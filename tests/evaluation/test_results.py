"""Where evaluation results are kept (tfseg/evaluation/results.py): one name per inference
setting, and files of one name written beside the others' (the whole eval run:
tests/train/test_modes.py)."""

import json
import os

import numpy as np
import pytest

from tests.train.conftest import scalars
from tfseg.evaluation.inference import InferenceConfig
from tfseg.evaluation.metrics import SegmentationMetrics
from tfseg.evaluation.results import result_name, settings, write


def test_each_setting_that_changes_the_numbers_is_in_the_name():
    names = [result_name(c) for c in (
        InferenceConfig(), InferenceConfig("sliding", (129, 129), (86, 86)),
        InferenceConfig("sliding", (97, 129), (64, 86)),
        InferenceConfig("multiscale", scales=(0.75, 1.0, 1.25), flip=True),
        InferenceConfig("multiscale", scales=(0.75, 1.0, 1.25), flip=False),
        InferenceConfig("multiscale", scales=(0.5, 1.5), flip=True))]
    assert names == ["whole", "sliding_129x129_stride86x86", "sliding_97x129_stride64x86",
                     "multiscale_0.75-1-1.25_flip", "multiscale_0.75-1-1.25",
                     "multiscale_0.5-1.5_flip"]
    # The pass sizes follow from the model, not from the user's choice: not in the name.
    assert result_name(InferenceConfig(size_multiple=32)) == "whole"
    assert settings(InferenceConfig("sliding", (65, 65), (43, 43), size_multiple=16)) == {
        "mode": "sliding", "window": [65, 65], "stride": [43, 43], "size_multiple": 16,
        "size_plus_one": False}


def _result(miou, step=7):
    return {"miou": miou, "pixel_accuracy": 0.5, "step": step}


def test_results_of_two_settings_are_kept_side_by_side(tmp_path):
    metrics = SegmentationMetrics(3, ["a", "b", "c"])
    metrics.update(np.array([[0, 1, 2]]), np.array([[0, 1, 1]]))
    write(str(tmp_path), "whole", _result(0.9), metrics)
    write(str(tmp_path), "sliding_65x65_stride43x43", _result(0.8), metrics)
    write(str(tmp_path), "whole", _result(0.95, step=9), metrics)  # replaces its own only
    files = sorted(n for n in os.listdir(tmp_path) if not n.startswith("events"))
    assert files == ["sliding_65x65_stride43x43.json", "sliding_65x65_stride43x43_confusion.csv",
                     "whole.json", "whole_confusion.csv"]
    assert json.load(open(tmp_path / "whole.json"))["miou"] == 0.95
    assert json.load(open(tmp_path / "sliding_65x65_stride43x43.json"))["miou"] == 0.8
    assert scalars(tmp_path, "miou/whole") == {7: pytest.approx(0.9), 9: pytest.approx(0.95)}
    assert scalars(tmp_path, "miou/sliding_65x65_stride43x43") == {7: pytest.approx(0.8)}
