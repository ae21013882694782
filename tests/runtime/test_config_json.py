"""config.json, the run's record: a damaged, mistyped or unknown-field file is one line
naming the file and the field; a resume compares the flags with it (real files, written
here; the command's refusals are tests/train/test_refusals.py's)."""

import json
import os

import pytest

from tfseg.config import Config
from tfseg.errors import InputError
from tfseg.runtime import files


def _write(folder, text):
    path = folder / files.CONFIG_FILE
    path.write_text(text if isinstance(text, str) else json.dumps(text))
    return str(path)


def _saved(**changes):
    """A config.json's dict, as training writes it, with entries of sections changed."""
    saved = {**json.loads(Config().to_json()), "class_names": ["a", "b"],
             "palette": [[0, 0, 0], [255, 255, 255]]}
    for key, value in changes.items():
        section, _, name = key.partition(".")
        if name:
            saved[section] = {**saved[section], name: value}
        else:
            saved[section] = value
    return saved


@pytest.mark.parametrize("content, names", [
    ("{\"model\": {", ["not valid JSON", "line 1"]),
    ("", ["not valid JSON"]),
    ("[1, 2]", ["not a JSON object"]),
    (_saved(**{"model.width_multiplier": "wide"}), ["model.width_multiplier", "'wide'",
                                                     "a number"]),
    (_saved(**{"data.crop_size": [64, "x"]}), ["data.crop_size", "'x'"]),
    (_saved(**{"data.crop_size": 64}), ["data.crop_size", "a list"]),
    (_saved(**{"run.jit_compile": 1}), ["run.jit_compile", "true or false"]),
    (_saved(**{"optim.train_steps": 2.5}), ["optim.train_steps", "an integer"]),
    (_saved(**{"model.colour": "red"}), ["model.colour", "unknown field"]),
    (_saved(colour="red"), ["colour", "unknown field"]),
    (_saved(model="big"), ["model", "an object"]),
    (_saved(class_names="ab"), ["class_names", "a list"]),
    (_saved(palette=[[0, 0, 0]]), ["palette", "class_names"]),
    (_saved(device="GPU:0"), ["device", "an object"]),
    (_saved(**{"model.width_multiplier": -1}), ["model.width_multiplier", "must be > 0"]),
    (_saved(**{"run.memory_budget_gb": float("inf")}), ["run.memory_budget_gb", "finite"]),
])
def test_a_damaged_config_json_is_one_line_naming_the_file_and_the_field(
        tmp_path, content, names):
    path = _write(tmp_path, content)
    with pytest.raises(InputError) as error:
        files.load_config(str(tmp_path))
    message = str(error.value)
    assert message.startswith(path) and "\n" not in message, message
    for name in names:
        assert name in message, (name, message)


def test_a_written_config_json_reads_back_and_old_forms_still_read(tmp_path):
    config = Config.from_flat(width_multiplier=0.5, crop_size=(65, 65), recompute=("aspp",))
    files.save_config(config, str(tmp_path), class_names=["a"], palette=[[1, 2, 3]],
                      memory_plan={"plan": {}},
                      device={"device": "CPU:0", "overhead_bytes": 0, "overhead_source": "x"})
    saved = files.load_config(str(tmp_path))
    assert Config.from_dict(saved) == config and saved["class_names"] == ["a"]
    # The flat form of runs saved before the sections, and a record without some settings.
    _write(tmp_path, {"dataset": "cityscapes", "width_multiplier": 1, "class_names": ["a"]})
    assert Config.settings_of(files.load_config(str(tmp_path))) == {
        "dataset": "cityscapes", "width_multiplier": 1}
    assert files.load_config(str(tmp_path / "nothing")) == {}


def test_an_unchanged_config_json_is_not_rewritten(tmp_path):
    config = Config.from_flat(width_multiplier=0.5)
    path = files.save_config(config, str(tmp_path), class_names=["a"])
    os.utime(path, (1, 1))
    files.save_config(config, str(tmp_path), class_names=["a"])
    assert os.path.getmtime(path) == 1  # the same record: left as it was
    files.save_config(config.replace(train_steps=70), str(tmp_path), class_names=["a"])
    assert os.path.getmtime(path) != 1 and files.load_config(str(tmp_path))["optim"][
        "train_steps"] == 70


def test_a_resume_names_what_changed_and_refuses_another_architecture(tmp_path):
    recorded = Config.from_flat(width_multiplier=0.5, train_steps=100, backbone="xception65")
    _write(tmp_path, json.loads(recorded.to_json()))
    saved = files.load_config(str(tmp_path))
    same = Config.changes(saved, recorded.replace(mode="train"))  # the mode is not a setting
    assert same == {}
    changed = Config.changes(saved, recorded.replace(train_steps=200, learning_rate=0.01))
    assert changed == {"train_steps": (100, 200),
                       "learning_rate": (recorded.optim.learning_rate, 0.01)}
    for flag, value, shown in (("width_multiplier", 0.25, "0.5"),
                               ("backbone", "mobilenetv2", "xception65"),
                               ("norm", "group", "batch")):
        with pytest.raises(InputError) as error:
            Config.check_resume(saved, recorded.replace(**{flag: value}), "RUN/config.json")
        message = str(error.value)
        assert message.startswith(f"--{flag}: ") and f"--{flag}={shown}" in message, message
        assert "RUN/config.json" in message
    # batch and sync_batch norms have the same variables: a change, not a refusal.
    assert Config.check_resume(saved, recorded.replace(norm="sync_batch"), "x") == {
        "norm": ("batch", "sync_batch")}


def test_a_run_saved_when_jit_compile_was_a_bool_reads_as_its_mode(tmp_path):
    """true was the whole step: it loads as "step", and a run that says --jit_compile
    (step) again or --nojit_compile against a saved false changes nothing."""
    from tfseg.config import Config

    for saved, mode in ((True, "step"), (False, "off")):
        record = {"run": {"jit_compile": saved}}
        assert Config.check_saved(record, "config.json").run.jit_compile == mode
        assert Config.changes(record, Config.from_flat(jit_compile=mode)) == {}
