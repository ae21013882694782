"""``tfseg.config``: one nested, frozen config; flags by name; validation naming the flag."""

import json
import subprocess
import sys

import pytest

from tests import command
from tfseg.config import DATASETS, SECTIONS, Config, Data, Model, flag_table
from tfseg.config.names import BACKBONES
from tfseg.config.values import kind_of
from tfseg.errors import InputError


@pytest.mark.parametrize("flag,value", [
    ("dropout", 2.0), ("dropout", -0.1), ("momentum", 5.0), ("momentum", 1.0),
    ("dataset", "foo"), ("scale_range", (2.0, 0.5)), ("scale_range", (0.0, 1.0)),
    ("data_service", "localhost:5000"), ("eval_every", -1), ("weight_decay", -1e-4),
    ("end_learning_rate", 1.0), ("lr_power", 0.0), ("num_summary_images", -1),
    ("report_verify_seconds", -1.0), ("weight_decay_type", "adamw"),
    ("max_skipped_updates", 0), ("eval_mode", "tiles"), ("eval_stride", (200, 200)),
    ("recompute", ("entry_block2",)), ("crop_size", (100, 100)), ("mode", "dance"),
    ("head_epsilon", 0.0), ("resize", "nearest"),
    # Non-finite numbers, in every float setting (scalars and lists).
    ("memory_budget_gb", float("inf")), ("memory_budget_gb", float("nan")),
    ("device_overhead_gb", float("inf")), ("cache_max_gb", float("inf")),
    ("report_verify_seconds", float("inf")), ("data_service_timeout", float("nan")),
    ("width_multiplier", float("inf")), ("dropout", float("nan")),
    ("learning_rate", float("inf")), ("weight_decay", float("inf")),
    ("class_weights", (1.0, float("inf"))), ("eval_scales", (1.0, float("nan"))),
    ("scale_range", (0.5, float("inf"))),
    # Devices named twice, however spelled.
    ("class_devices", ("CPU:0", "/device:CPU:0")), ("model_devices", ("GPU:1", "/gpu:1")),
])
def test_bad_values_name_their_flag(flag, value):
    with pytest.raises(InputError, match=f"^--{flag}: "):
        Config.from_flat(**{flag: value})


@pytest.mark.parametrize("flag,value,names,close", [
    ("dataset", "cityscape", DATASETS, "cityscapes"), ("backbone", "resnet5", BACKBONES,
                                                       "resnet50")])
def test_an_unknown_data_set_or_backbone_is_one_line_listing_the_registered_ones(
        flag, value, names, close):
    """Both lists are ``tfseg.config.registry``'s, the ones the readers and backbones are
    checked against (tests/data/test_registry.py, tests/models/test_applications.py)."""
    with pytest.raises(InputError) as error:
        Config.from_flat(**{flag: value})
    assert str(error.value) == (f"--{flag}: must be one of {', '.join(names)}, got {value!r} "
                                f"(did you mean {close}?)")
    help_ = flag_table()[flag][1].metadata["help"]
    assert all(name in help_ for name in names)


def test_cross_section_rules_name_a_flag():
    # The crop (data) must fit the output stride (model): 65 = 8 * 8 + 1 and 97 = 8 * 12 + 1.
    assert Config.from_flat(crop_size=(65, 97), output_stride=8).data.crop_size == (65, 97)
    with pytest.raises(InputError, match="^--crop_size: 66x66 does not fit output stride 32"):
        Config.from_flat(crop_size=(66, 66), output_stride=32)
    with pytest.raises(InputError, match="^--jit_compile: "):
        Config.from_flat(jit_compile=True, strategy="mirrored")
    with pytest.raises(InputError, match="^--warmup_steps: "):
        Config.from_flat(train_steps=10, warmup_steps=10)


@pytest.mark.parametrize("args,line", [
    # A short --train_steps alone: the default warm-up is what does not fit.
    (("--train_steps=3",), "--warmup_steps: must be >= 0 and smaller than --train_steps=3, "
                           "got 25 (its default)"),
    (("--train_steps=3", "--warmup_steps=5"),
     "--warmup_steps: must be >= 0 and smaller than --train_steps=3, got 5"),
    # 0 is a multiple of every stride: the stride rule would not say what is wrong.
    (("--crop_size=0",), "--crop_size: each side must be at least 1, got 0,0"),
    (("--learning_rate=-1",), "--learning_rate: must be > 0, got -1.0"),
])
def test_a_refusal_echoes_the_value_and_what_it_is_checked_against(args, line):
    proc = command.run("--mode=validate", *args)
    assert proc.returncode == 2 and proc.stderr.strip() == f"tfseg: error: {line}", \
        proc.stderr


def test_flat_names_route_to_their_sections():
    config = Config.from_flat(data_dir="/d", eval_mode="sliding", eval_crop=(65, 65),
                              eval_stride=(33, 33), width_multiplier=0.5, momentum=0.5,
                              model_dir="/m")
    assert (config.data.root, config.eval.mode, config.eval.crop) == ("/d", "sliding", (65, 65))
    assert (config.model.width_multiplier, config.optim.momentum) == (0.5, 0.5)
    assert config.run.model_dir == "/m" and config.flat()["data_dir"] == "/d"
    # Everything else keeps its default, section by section.
    assert config.model == Model(width_multiplier=0.5) and config.data == Data(root="/d")
    with pytest.raises(TypeError, match="no setting 'root'"):
        config.replace(root="/x")  # a field name is not a flag name


def test_every_field_is_one_flag_with_help():
    table = flag_table()
    fields = sum(len(cls.__dataclass_fields__) for cls in SECTIONS.values())
    assert len(table) == fields  # no two fields share a flag name
    assert all(field.metadata["help"] for _, field in table.values())


def test_flags_parse_lists_and_saved_configs_round_trip():
    values = {**Config().flat(), "crop_size": ["65"], "eval_scales": ["0.5", "1"],
              "recompute": ["middle"], "class_weights": [], "scale_range": ["0.5", "2"],
              "eval_crop": ["129", "129"], "eval_stride": ["86", "86"]}
    config = Config.from_flags(values)
    assert config.data.crop_size == (65, 65) and config.eval.scales == (0.5, 1.0)
    assert config.model.recompute == ("middle",)
    with pytest.raises(InputError, match="^--crop_size: expected integers, got .big.$"):
        Config.from_flags({**values, "crop_size": ["big"]})
    with pytest.raises(InputError, match="^--eval_crop: expected 2 values, got 3"):
        Config.from_flags({**values, "eval_crop": ["1", "2", "3"]})
    # A size of the right shape but out of range names the rule, not the shape.
    with pytest.raises(InputError, match="^--eval_crop: each side must be at least 1, got 0,0$"):
        Config.from_flags({**values, "eval_crop": ["0", "0"]})
    saved = {**json.loads(config.to_json()), "class_names": ["a"], "palette": [[0, 0, 0]]}
    assert Config.from_dict(saved) == config
    # A run saved before the reference conventions: the model it was, today's defaults.
    old = json.loads(config.to_json())
    del old["model"]["head_epsilon"], old["model"]["resize"]
    assert Config.from_dict(old) == config
    assert (config.model.head_epsilon, config.model.resize) == (1e-3, "half_pixel")
    # A run saved before the sections: flat flag names.
    assert Config.from_dict({"width_multiplier": 0.5, "data_dir": "/d", "class_names": []}) == \
        Config.from_flat(width_multiplier=0.5, data_dir="/d")


def test_the_config_module_imports_no_tensorflow():
    code = ("import sys, tfseg.config, tfseg.errors, tfseg.runtime.signals; "
            "print('tensorflow' in sys.modules or 'keras' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_every_float_setting_is_checked_for_a_finite_value():
    """One rule for them all, so that a new float setting cannot miss it."""
    for flag, (section, field) in flag_table().items():
        default = Config().flat()[flag]
        items = field.metadata["items"]
        if isinstance(default, float) or (items and items[0] is float):
            value = float("inf") if isinstance(default, float) else (float("inf"),) * (
                items[1] or 1)
            with pytest.raises(InputError, match=f"^--{flag}: must be (a )?finite"):
                Config.from_flat(**{flag: value})


def test_a_file_where_a_folder_is_needed_names_its_flag(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    for flag in ("model_dir", "data_dir"):
        with pytest.raises(InputError, match=f"^--{flag}: {a_file} is a file, not a folder"):
            Config.from_flat(**{flag: str(a_file)})
        Config.from_flat(**{flag: str(tmp_path / "not_yet")})  # made when needed


# For each kind of setting, values of another type, which no flag's text gives either:
# "no" is not False, and None is no value (RewriteOptions took both).
WRONG_TYPES = {"bool": ("no", "yes", None, 2, 0.5), "int": ("two", 2.7, None, True, [1]),
               "float": ("fast", None, True, 1j, [0.5]), "str": (5, None, True, ("a",)),
               "path": (5, None, True, b"runs"), "size": (None, True, "a,b", {"a": 1}),
               "list": (None, True, {"a": 1}, (None,)), "choice": (None, 2.5, 5, ["step"])}


def test_every_setting_refuses_a_value_of_another_type_in_one_line_naming_it():
    """Every field, not one of each kind: a new setting cannot miss the check."""
    kinds = {kind_of(field) for _, field in flag_table().values()}
    assert kinds == set(WRONG_TYPES)  # a new kind of setting needs its wrong values here
    for flag, (_, field) in flag_table().items():
        for value in WRONG_TYPES[kind_of(field)]:
            with pytest.raises(InputError) as error:
                Config.from_flat(**{flag: value})
            message = str(error.value)
            assert message.startswith(f"--{flag}: ") and "\n" not in message, message
            assert " got " in message, message  # and the value given
