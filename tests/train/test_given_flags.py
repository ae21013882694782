"""A flag given on the command line wins over a run's config.json, or the command is
refused in one line naming both (tfseg.evaluation.loading.resolve); and no mode writes
the synthetic set over a user's data set (tfseg.data.synthetic.require_free)."""

import json
import os
import pathlib
import shutil

import pytest

from tests.train.conftest import TINY_FLAGS, run_main
from tfseg.data import synthetic


def _tree(root):
    """{relative path: bytes} of every file under ``root``."""
    return {os.path.relpath(os.path.join(d, n), root): open(os.path.join(d, n), "rb").read()
            for d, _, names in os.walk(root) for n in names}


def _one_line(proc):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.fixture
def users_city(data_dir, tmp_path):
    """A folder in the Cityscapes layout that is the user's: no synthetic marker."""
    root = shutil.copytree(data_dir, tmp_path / "mycity")
    os.remove(root / synthetic.MARKER)
    return root


def test_train_on_a_users_data_set_with_dataset_left_at_synthetic_is_refused(
        users_city, tmp_path):
    before = _tree(users_city)
    proc = run_main("--mode=train", f"--data_dir={users_city}", f"--model_dir={tmp_path}/run",
                    "--train_steps=2", "--warmup_steps=0", check=False)
    line = _one_line(proc)
    assert line.startswith(f"tfseg: error: --data_dir: {users_city} holds gtFine, leftImg8bit")
    assert "pass --dataset=cityscapes" in line
    assert _tree(users_city) == before


def test_eval_reads_the_given_dataset_not_the_runs_and_keeps_its_files(
        trained_copy, users_city):
    """The run recorded synthetic; --dataset=cityscapes is read as given (same classes)."""
    _, model_dir = trained_copy
    record = json.loads((model_dir / "config.json").read_text())
    record["data"]["dataset"] = "synthetic"
    (model_dir / "config.json").write_text(json.dumps(record))
    before = _tree(users_city)
    proc = run_main("--mode=eval", f"--model_dir={model_dir}", "--dataset=cityscapes",
                    f"--data_dir={users_city}")
    assert "reading --dataset=cityscapes as given, not the run's synthetic" in proc.stdout
    result = json.loads((model_dir / "eval" / "whole.json").read_text())
    assert result["split"] == "val" and 0 <= result["miou"] <= 1
    assert _tree(users_city) == before


@pytest.mark.parametrize("mode,flag,recorded", [
    ("eval", "--width_multiplier=0.5", "--width_multiplier=0.25"),
    ("predict", "--middle_repeats=3", "--middle_repeats=1"),
    ("export", "--norm=group", "--norm=batch"),
])
def test_a_given_setting_the_checkpoint_cannot_have_is_refused_naming_both(
        trained_copy, tmp_path, mode, flag, recorded):
    data_dir, model_dir = trained_copy
    image = sorted(pathlib.Path(data_dir).glob("leftImg8bit/val/*/*.png"))[0]
    proc = run_main(f"--mode={mode}", f"--model_dir={model_dir}", f"--data_dir={data_dir}",
                    "--dataset=cityscapes", f"--input_path={image}",
                    f"--output_dir={tmp_path / 'out'}", flag, check=False)
    line = _one_line(proc)
    assert line.startswith(f"tfseg: error: {flag}: the checkpoint {model_dir}/ckpt-6 was "
                           f"trained with {recorded} ({model_dir}/config.json)"), line
    assert not (tmp_path / "out").exists() and not (model_dir / "export").exists()


def test_a_recipes_setting_the_checkpoint_cannot_have_names_the_recipe_and_the_fix(
        trained_copy):
    """Eval with a recipe whose model the run was not trained as (the run's width and
    middle units given after it in training): the refused value is the recipe's, which
    cannot be left out, so the line names the recipe and what to put after it, and that
    works."""
    data_dir, model_dir = trained_copy
    recipe = "cityscapes_xception65_os16_crop769"
    where = [f"--recipe={recipe}", f"--data_dir={data_dir}", f"--model_dir={model_dir}"]
    line = _one_line(run_main("--mode=eval", *where, check=False))
    assert line == (f"tfseg: error: --width_multiplier=1.0 (from --recipe={recipe}): the "
                    f"checkpoint {model_dir}/ckpt-6 was trained with --width_multiplier=0.25 "
                    f"({model_dir}/config.json); give --width_multiplier=0.25 "
                    f"--middle_repeats=1 after --recipe={recipe} to use the trained model's")
    run_main("--mode=eval", *where, "--width_multiplier=0.25", "--middle_repeats=1",
             "--eval_mode=whole")
    assert json.loads((model_dir / "eval" / "whole.json").read_text())["step"] == 6


def test_a_given_dataset_of_other_classes_is_refused_naming_both(trained_copy, tmp_path):
    _, model_dir = trained_copy
    proc = run_main("--mode=eval", f"--model_dir={model_dir}", "--dataset=voc",
                    f"--data_dir={tmp_path / 'voc'}", check=False)
    line = _one_line(proc)
    assert line == (f"tfseg: error: --dataset=voc: it has 21 classes, and the checkpoint "
                    f"{model_dir}/ckpt-6 was trained on cityscapes's 19 "
                    f"({model_dir}/config.json); leave --dataset out to read cityscapes")


def test_resume_with_a_given_setting_of_other_variables_is_refused(trained_copy):
    data_dir, model_dir = trained_copy
    flags = [f for f in TINY_FLAGS if not f.startswith("--width_multiplier")]
    proc = run_main("--mode=train", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
                    "--train_steps=8", *flags, "--width_multiplier=0.5", check=False)
    assert "--width_multiplier" in _one_line(proc)
