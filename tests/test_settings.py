"""One parser per setting for both doors: the command's flags and the Python API
(``Config.replace``, ``tfseg.train(...)``) accept the same values of each kind (int,
float, bool, enum, str, size, list, path), in the flag's text or the natural Python form,
and refuse the rest in the same line naming the flag; what ``Config`` keeps is what
config.json's reader (every mode's) accepts. No TensorFlow here: the API's own doors
are tests/test_api.py's."""

import json
import pathlib

import numpy as np
import pytest

from tests import command
from tfseg.config import Config, flag_table
from tfseg.config.values import kind_of
from tfseg.errors import InputError

EXPORTS = "saved_model, keras, tflite, onnx"
# kind: (a flag of that kind, [(accepted, its value)], [(refused, the line after "--flag: ")]).
KINDS = {
    "int": ("train_steps", [(100, 100), ("100", 100), (np.int64(100), 100), (100.0, 100)],
            [(2.7, "must be an integer, got 2.7"), ("two", "must be an integer, got 'two'"),
             ("2.7", "must be an integer, got '2.7'"), (True, "must be an integer, got True"),
             (None, "must be an integer, got None"), (0, "must be >= 1, got 0")]),
    "float": ("learning_rate", [(1, 1.0), ("0.5", 0.5), (np.float32(0.5), 0.5)],
              [("abc", "must be a number, got 'abc'"), (True, "must be a number, got True"),
               (float("inf"), "must be a finite number, got inf"),
               ("nan", "must be a finite number, got nan"),
               (-1.0, "must be > 0, got -1.0")]),
    "bool": ("jitter", [(True, True), ("false", False), ("t", True), (1, True), (0, False)],
             [("yes", "must be true or false, got 'yes'"), (2, "must be true or false, got 2"),
              (None, "must be true or false, got None")]),
    "enum": ("norm", [("group", "group")],
             [("layer", "must be one of batch, sync_batch, group, got 'layer'"),
              (3, "must be a string, got 3")]),
    "choice": ("jit_compile", [(True, "step"), ("false", "off"), ("blocks", "blocks"),
                               (0, "off")],
               [("fast", "must be one of off, step, blocks, auto, got 'fast'"),
                (2.5, "must be a string, got 2.5")]),
    "str": ("data_service", [("grpc://host:5050", "grpc://host:5050")],
            [(5050, "must be a string, got 5050"),
             ("host:5050", "must look like grpc://HOST:PORT, got 'host:5050'")]),
    "size": ("crop_size", [((64, 64), (64, 64)), ([64, 64], (64, 64)), ("64,64", (64, 64)),
                           ("64, 80", (64, 80)), ("64", (64, 64)), (64, (64, 64)),
                           (("64", "80"), (64, 80))],
             [("64x64", "expected integers, got '64x64'"),
              ((64.5, 64), "expected integers, got '64.5,64'"),
              ((64, 64, 64), "expected 2 values, got 3"), ("", "expected 2 values, got 0"),
              (None, "must be a list of integers (A,B or a list or tuple), got None"),
              ((60, 60), "60x60 does not fit output stride 16: each side must be a multiple "
                         "of it or one more (e.g. 513, 769, 1024)")]),
    "list": ("export_format", [("tflite", ("tflite",)), ("saved_model,tflite",
                                                        ("saved_model", "tflite")),
                               (["tflite"], ("tflite",)), (("keras", "onnx"), ("keras", "onnx"))],
             [("tflite,x", f"must be one of {EXPORTS}, got 'x'"),
              (("tflite", 3), "expected strings, got 'tflite,3'"),
              (3, "must be a list of strings (A,B or a list or tuple), got 3"),
              ("", "is empty; name at least one format")]),
    "float list": ("eval_scales", [([1, 1.5], (1.0, 1.5)), ("0.5,1", (0.5, 1.0)), (2, (2.0,))],
                   [("1,big", "expected numbers, got '1,big'"),
                    ((1.0, float("nan")), "must be finite numbers, got 1.0,nan")]),
    "path": ("model_dir", [(pathlib.Path("runs/x"), "runs/x"), ("runs/x", "runs/x")],
             [(3, "must be a path (a string or os.PathLike), got 3"),
              (b"runs/x", "must be a path (a string or os.PathLike), got b'runs/x'"),
              ("", "is empty; give the run's folder (default: runs/synthetic)")]),
}
ACCEPTED = [(flag, given, value) for flag, accepted, _ in KINDS.values()
            for given, value in accepted]
REFUSED = [(flag, given, why) for flag, _, refused in KINDS.values() for given, why in refused]


def test_every_kind_of_setting_is_in_the_table():
    """A new kind of setting needs its row here."""
    kinds = {kind_of(field) for _, field in flag_table().values()}
    assert kinds == {"int", "float", "bool", "str", "size", "list", "path", "choice"}
    assert {kind_of(flag_table()[flag][1]) for flag, _, _ in KINDS.values()} == kinds


@pytest.mark.parametrize("flag,given,value", ACCEPTED, ids=repr)
def test_the_flags_text_and_the_python_value_are_both_accepted(flag, given, value):
    config = Config.from_flat(**{flag: given})
    parsed = config.flat()[flag]
    assert parsed == value and type(parsed) is type(value)
    assert Config().replace(**{flag: given}) == config


@pytest.mark.parametrize("flag,given,why", REFUSED, ids=repr)
def test_a_bad_setting_is_one_line_naming_its_flag(flag, given, why):
    with pytest.raises(InputError) as error:
        Config.from_flat(**{flag: given})
    assert str(error.value) == f"--{flag}: {why}"


@pytest.mark.parametrize("flag,given,why", [case for case in REFUSED
                                            if isinstance(case[1], str)], ids=repr)
def test_the_command_refuses_the_same_text_in_the_same_line(flag, given, why):
    """The flags keep their text; the same parser reads it (``Config.from_flags``)."""
    proc = command.run("--mode=validate", f"--{flag}={given}")
    assert proc.returncode == 2 and proc.stderr.strip() == f"tfseg: error: --{flag}: {why}", \
        proc.stderr


def test_the_command_reads_its_text_as_the_api_does():
    args = ("--mode=validate", "--train_steps=0x10", "--warmup_steps=0", "--nojitter",
            "--crop_size=65", "--export_format=tflite", "--learning_rate=1e-2")
    proc = command.run(*args)
    assert proc.returncode == 0, proc.stderr
    assert Config.from_flags({**Config().flat(), "mode": "validate", "train_steps": "0x10",
                              "warmup_steps": "0", "jitter": "false", "crop_size": "65",
                              "export_format": "tflite", "learning_rate": "1e-2"}) == \
        Config.from_flat(mode="validate", train_steps=16, warmup_steps=0, crop_size=(65, 65),
                         export_format=("tflite",), learning_rate=0.01)


# kind: settings in a Python form a run may start with; each was kept as given (a numpy
# number that JSON cannot write, a list, 1 for true, a Path), so config.json was unwritable
# or refused by every later command.
PYTHON_FORMS = {
    "int": dict(train_steps=np.int64(5), warmup_steps=2.0),
    "float": dict(learning_rate=np.float32(0.5), end_learning_rate=0),
    "bool": dict(jitter=1, deterministic=np.int64(0)),
    "enum": dict(norm="group", eval_mode="sliding"),
    "size": dict(crop_size=[65, 65], eval_crop=(65, 65), eval_stride=[33, 33]),
    "list": dict(export_format=["tflite"], eval_scales=[1, 2], recompute=["aspp"]),
    "path": dict(model_dir=pathlib.Path("runs/x"), data_dir=pathlib.Path("data/x")),
}


@pytest.mark.parametrize("kind", PYTHON_FORMS)
def test_a_run_started_from_python_values_writes_a_config_json_every_mode_reads(kind):
    """config.json's reader (``Config.check_saved``, what every mode's ``load_config``
    runs) takes back what ``Config`` writes: the same config, JSON's own types."""
    config = Config.from_flat(**PYTHON_FORMS[kind])
    saved = json.loads(config.to_json())
    assert Config.check_saved(saved, "RUN/config.json") == config
    assert Config.from_dict(saved) == config and hash(config) == hash(Config.from_dict(saved))


def test_a_config_of_anything_but_its_sections_is_one_line():
    with pytest.raises(InputError, match="^Config: data must be a tfseg.config.Data, got dict; "
                                         "settings by flag name go to Config.from_flat"):
        Config(data={"crop_size": (65, 65)})
    with pytest.raises(TypeError, match=r"^no setting 'train_step' \(did you mean "
                                        r"train_steps\?\)$"):
        Config.from_flat(train_step=10)


def test_the_constructor_takes_settings_by_flag_name_as_from_flat_does():
    """``tfseg.Config(crop_size=(0, 64))`` was a plain TypeError (the dataclass's
    ``__init__`` took its sections only) that no check saw; it is ``from_flat``'s
    InputError naming the flag now, and an accepted value is ``from_flat``'s config."""
    for flag, given, why in REFUSED:
        with pytest.raises(InputError) as error:
            Config(**{flag: given})
        assert str(error.value) == f"--{flag}: {why}"
    with pytest.raises(InputError, match="^--crop_size: each side must be at least 1, got 0,64"):
        Config(crop_size=(0, 64))
    for flag, given, value in ACCEPTED:
        assert Config(**{flag: given}) == Config.from_flat(**{flag: given})
    config = Config(crop_size="65,65", train_steps=100, warmup_steps=0)
    assert config == Config.from_flat(crop_size=(65, 65), train_steps=100, warmup_steps=0)
    assert hash(config) == hash(Config.from_flat(crop_size=(65, 65), train_steps=100,
                                                 warmup_steps=0))
    # Sections and settings together: the settings change the sections given.
    from tfseg.config import Data
    assert Config(Data(crop_size=(33, 33)), batch_size=2).data == Data(crop_size=(33, 33),
                                                                       batch_size=2)
    with pytest.raises(TypeError, match=r"^no setting 'tran_steps' \(did you mean "
                                        r"train_steps\?\)$"):
        Config(tran_steps=10)
