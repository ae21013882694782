"""``tfseg.train`` / ``evaluate`` / ``predict`` / ``export``: the command's modes in Python,
with keyword overrides by flag name."""

import json
import os
import pathlib

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


# The API parses each setting as its flag is (tfseg.config.values; every kind is
# tests/test_settings.py's), before TensorFlow starts or anything is written.
@pytest.mark.parametrize("steps,why", [(2.7, "must be an integer, got 2.7"),
                                       ("two", "must be an integer, got 'two'")])
def test_a_bad_train_steps_is_refused_before_anything_is_written(tmp_path, steps, why):
    """2.7 trained 3 steps, saved no checkpoint and wrote a config.json that every later
    command refused; "two" was a TypeError from inside."""
    with pytest.raises(InputError) as error:
        tfseg.train(train_steps=steps, model_dir=str(tmp_path / "run"),
                    data_dir=str(tmp_path / "data"), log=lambda _: None,
                    **{**TINY, "dataset": "synthetic"})
    assert str(error.value) == f"--train_steps: {why}"
    assert list(tmp_path.iterdir()) == []


def test_sizes_and_lists_are_read_as_their_flags_are(tmp_path):
    """crop_size=(64, 64) as "64,64" is; export_format="tflite" as the flag's list (it was
    the list of its letters: "got 't'")."""
    assert {config_of(crop_size=size).data.crop_size
            for size in ((64, 64), [64, 64], "64,64", "64", 64)} == {(64, 64)}
    assert config_of(export_format="tflite").run.export_format == ("tflite",)
    assert config_of(export_format="keras,tflite").run.export_format == ("keras", "tflite")
    assert config_of(export_format=["tflite"]).run.export_format == ("tflite",)
    # It gets as far as the checkpoint (there is none), naming the flag as the command does.
    with pytest.raises(FileNotFoundError, match="^--model_dir: no checkpoint in"):
        tfseg.export(model_dir=tmp_path, export_format="tflite", log=lambda _: None)


def test_a_dict_of_settings_is_a_config_and_anything_else_one_line(tmp_path):
    """``tfseg.export({"model_dir": ...})`` raised AttributeError."""
    assert config_of({"model_dir": str(tmp_path)}, crop_size="65,65") == \
        tfseg.Config.from_flat(model_dir=str(tmp_path), crop_size=(65, 65))
    with pytest.raises(FileNotFoundError, match=f"^--model_dir: no checkpoint in {tmp_path}"):
        tfseg.export({"model_dir": str(tmp_path)}, log=lambda _: None)
    with pytest.raises(InputError, match="^config: must be a tfseg.Config or a dict of "
                                         "settings by flag name, got str; or pass the settings"):
        tfseg.export(str(tmp_path))
    with pytest.raises(InputError, match="^--crop_size: expected integers, got 'big'$"):
        tfseg.evaluate({"crop_size": "big"})


def test_a_runs_config_json_dict_is_read_as_that_file_is(tmp_path):
    """``config_of(json.load(open("RUN/config.json")))`` raised ``TypeError: no setting
    'data'``: its sections and records are read as every mode reads that file, and a bad
    field is refused naming it."""
    from tfseg.runtime import files

    run = tfseg.Config.from_flat(model_dir=str(tmp_path), crop_size=(65, 65),
                                 width_multiplier=0.25, export_format=("tflite",))
    files.save_config(run, str(tmp_path), class_names=["sky", "road"],
                      palette=[[0, 0, 255], [128, 64, 128]])
    with open(tmp_path / "config.json") as f:
        saved = json.load(f)
    assert config_of(saved) == run
    assert config_of(saved, batch_size=3, crop_size="33,33") == \
        run.replace(batch_size=3, crop_size=(33, 33))
    for field, value, why in [("width_multiplier", "wide", ""),
                              ("bogus", 1, "unknown field: not a setting of this tfseg")]:
        bad = {**saved, "model": {**saved["model"], field: value}}
        with pytest.raises(InputError, match=f"^config: model\\.{field}: {why}"):
            config_of(bad)
    with pytest.raises(InputError, match="^config: data: must be an object of settings"):
        tfseg.evaluate({**saved, "data": 3})
    with pytest.raises(InputError, match="^config: data.crop_size: 66x66 does not fit"):
        config_of({**saved, "data": {**saved["data"], "crop_size": [66, 66]}})


@pytest.mark.slow
def test_a_run_started_with_python_values_is_read_by_every_later_command(tmp_path):
    """Numpy numbers, 1 for true, lists for sizes and lists, Paths: config.json records
    them as the flags would, and eval (in Python and the command) reads it."""
    import numpy as np

    from tests import command
    from tfseg.data import write_synthetic_cityscapes
    from tfseg.runtime import files

    data = write_synthetic_cityscapes(str(tmp_path / "data"), num_train=4, num_val=2,
                                      height=64, width=96, seed=0)
    run = tmp_path / "run"
    settings = {**TINY, "train_steps": np.int64(2), "learning_rate": np.float32(0.01),
                "crop_size": [64, 64], "scale_range": [1, 2], "jitter": 1,
                "export_format": ["keras"], "checkpoint_every": 2.0}
    result = tfseg.train(model_dir=run, data_dir=pathlib.Path(data), log=lambda _: None,
                         **settings)
    assert result["step"] == 2 and result["checkpoint"].endswith("ckpt-2")
    saved = files.load_config(str(run))
    assert saved["data"]["crop_size"] == [64, 64] and saved["run"]["model_dir"] == str(run)
    assert saved["data"]["jitter"] is True and saved["optim"]["train_steps"] == 2
    assert tfseg.evaluate(model_dir=run, data_dir=data, log=lambda _: None,
                          **TINY)["step"] == 2
    proc = command.run("--mode=eval", f"--model_dir={run}", f"--data_dir={data}",
                       "--dataset=cityscapes")
    assert proc.returncode == 0 and "mIoU" in proc.stdout, proc.stderr[-2000:]
