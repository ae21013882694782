"""``tfseg --recipe=NAME`` and ``--mode=recipes``: the recipes shipped in ``tfseg/recipes/``
(``flags/`` in the checkout is that folder), read as a flagfile is, listed without TensorFlow.

The command's ``main`` runs in this process (``tests.command``); an install of the package
outside the checkout: tests/test_package.py."""

import json
import os
import subprocess
import sys

import pytest

from tests import command as cli
from tfseg import recipes
from tfseg.config import Config

_main = cli.run
NAMES = recipes.names()


def _settings(proc):
    """{flag: value} of the config that --mode=validate printed."""
    assert proc.returncode == 0, proc.stderr
    return Config.settings_of(json.loads(proc.stdout))


def _one_error_line(proc):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfseg: error: "), proc.stderr
    return lines[0]


def test_flags_in_the_checkout_is_the_recipes_folder():
    """One source: the checkout's flags/ paths and the package's recipes are the same files."""
    assert os.path.realpath(os.path.join(cli.ROOT, "flags")) == os.path.realpath(recipes.FOLDER)
    assert {"synthetic", "cityscapes_xception65_os16_fullres", "cityscapes_xception65_os16_crop769",
            "voc_xception65_os16", "camvid"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_a_recipe_is_its_flagfile(name):
    by_name = _settings(_main(f"--recipe={name}", "--mode=validate"))
    by_path = _settings(_main(f"--flagfile={cli.ROOT}/flags/{name}.flags", "--mode=validate"))
    assert by_name == by_path


def test_a_flag_after_the_recipe_wins_and_one_before_it_loses():
    after = _settings(_main("--recipe", "voc_xception65_os16", "--batch_size=2",
                            "--mode=validate"))
    assert after["batch_size"] == 2
    assert after["dataset"] == "voc" and after["crop_size"] == (513, 513)
    before = _settings(_main("--batch_size=2", "--recipe=voc_xception65_os16",
                             "--mode=validate"))
    assert before["batch_size"] == 8


def test_a_flagfile_may_start_from_a_recipe_and_recipes_from_each_other(tmp_path, monkeypatch):
    mine = tmp_path / "mine.flags"
    mine.write_text("# camvid, smaller\n--recipe=camvid\n--batch_size=3\n")
    config = _settings(_main(f"--flagfile={mine}", "--mode=validate"))
    assert (config["dataset"], config["batch_size"], config["crop_size"]) == \
        ("camvid", 3, (353, 481))
    # Recipes that read recipes (a folder of them, as the package's is).
    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / "base.flags").write_text("# base\n--dataset=voc\n--batch_size=5\n")
    (folder / "derived.flags").write_text("# derived\n--recipe=base\n--batch_size=6\n")
    (folder / "loop.flags").write_text("# reads itself\n--recipe=loop\n")
    monkeypatch.setattr(recipes, "FOLDER", str(folder))
    config = _settings(_main("--recipe=derived", "--mode=validate"))
    assert (config["dataset"], config["batch_size"]) == ("voc", 6)
    assert "includes itself" in _one_error_line(_main("--recipe=loop", "--mode=validate"))


def test_every_form_absl_takes_for_a_flag_names_a_recipe(tmp_path):
    """--recipe NAME as one line of a flagfile and -recipe=NAME, as absl reads --flagfile."""
    want = _settings(_main("--recipe=camvid", "--mode=validate"))
    mine = tmp_path / "mine.flags"
    mine.write_text("--recipe camvid\n")
    assert _settings(_main(f"--flagfile={mine}", "--mode=validate")) == want
    assert _settings(_main("-recipe=camvid", "--mode=validate")) == want


def test_after_a_double_dash_a_recipe_is_not_read():
    argv = ["tfseg", "--mode=validate", "--", "--recipe=camvid"]
    assert recipes.expand(argv, lambda args: args) == argv


def test_an_unknown_recipe_is_one_line_listing_the_recipes():
    line = _one_error_line(_main("--recipe=cityscapes_fullres", "--mode=validate"))
    assert line.startswith("tfseg: error: --recipe: must be one of ")
    assert all(name in line for name in NAMES)
    assert "did you mean cityscapes_xception65_os16_fullres?" in line
    assert "needs a name" in _one_error_line(_main("--mode=validate", "--recipe"))


def test_mode_recipes_lists_each_with_its_first_comment_line():
    proc = _main("--mode=recipes")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines] == NAMES
    for name, line in zip(NAMES, lines):
        with open(recipes.path(name)) as f:
            first = f.readline()
        assert first.startswith("# ") and line.endswith(first[2:].strip()), (name, line)
        assert len(line) < 160, line  # one line of a wide terminal


def test_mode_recipes_runs_without_tensorflow():
    # The console script's entry point, in a fresh interpreter; what it has imported is
    # printed as it exits.
    code = ("import atexit, sys\n"
            "atexit.register(lambda: print('tensorflow' in sys.modules "
            "or 'keras' in sys.modules))\n"
            "sys.argv = ['tfseg', '--mode=recipes']\n"
            "from tfseg.cli.main import run\n"
            "run()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=cli.main_env(), cwd=cli.ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(NAMES) + 1 and lines[-1] == "False", proc.stdout
