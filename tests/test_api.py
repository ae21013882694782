"""``tfseg.train`` / ``evaluate`` / ``predict`` / ``export``: the command's modes in Python,
with keyword overrides by flag name."""

import json
import os

import pytest

import tfseg
from tfseg.api import config_of
from tfseg.errors import InputError
from tfseg.runtime import device

# tests/train's tiny run, as keywords.
TINY = dict(dataset="cityscapes", width_multiplier=0.25, middle_repeats=1, crop_size=(64, 64),
            batch_size=2, warmup_steps=0, log_every=1, learning_rate=0.01, seed=0)


def test_overrides_are_flag_names_and_bad_ones_are_named():
    config = config_of(tfseg.Config(), crop_size=(65, 65), memory_saving=True)
    assert config.data.crop_size == (65, 65) and config.model.memory_saving
    assert config_of() == tfseg.Config()
    with pytest.raises(TypeError, match="no setting 'crop'"):
        config_of(crop=(65, 65))
    with pytest.raises(InputError, match="^--batch_size"):
        config_of(batch_size=0)


@pytest.mark.slow
def test_train_evaluate_predict_export_in_python(tmp_path):
    from tfseg.data import write_synthetic_cityscapes

    data_dir = write_synthetic_cityscapes(str(tmp_path / "data"), num_train=4, num_val=2,
                                          height=64, width=96, seed=0)
    run = str(tmp_path / "run")
    messages = []
    result = tfseg.train(data_dir=data_dir, model_dir=run, train_steps=2, checkpoint_every=2,
                         log=messages.append, **TINY)
    assert result["step"] == 2 and result["checkpoint"].endswith("ckpt-2")
    assert any("from scratch" in m for m in messages)
    # config.json records the device trained on and its overhead (0 on the CPU).
    recorded = json.load(open(os.path.join(run, "config.json")))["device"]
    assert recorded["device"] == device.name() and recorded["overhead_source"]
    assert recorded["overhead_bytes"] == 0 or device.name() != "CPU:0"
    metrics = tfseg.evaluate(data_dir=data_dir, model_dir=run, log=messages.append, **TINY)
    assert metrics == json.load(open(os.path.join(run, "eval", "whole.json")))
    assert 0 <= metrics["miou"] <= 1 and metrics["step"] == 2
    image = sorted(p for p, _, files in os.walk(data_dir) for f in files if "leftImg8bit" in f)
    written = tfseg.predict(model_dir=run, input_path=image[0], output_dir=str(tmp_path / "out"),
                            log=messages.append)
    assert written and all(os.path.exists(p) for p in written)
    export_dir = tfseg.export(model_dir=run, log=messages.append)
    assert os.path.exists(os.path.join(export_dir, "model.keras"))
