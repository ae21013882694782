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


def test_given_by_names_the_recipe_whose_line_sets_each_setting_last(tmp_path):
    """A flag after the recipe wins, one before it loses; a recipe read from a flagfile
    counts by its own name; --noNAME sets NAME."""
    names = {"dataset", "batch_size", "memory_saving", "crop_size", "width_multiplier"}
    mine = tmp_path / "mine.flags"
    mine.write_text("--recipe camvid\n--crop_size=9,9\n")
    argv = ["tfseg", "--dataset=voc", "--recipe=cityscapes_xception65_os16_crop769",
            "--nomemory_saving", f"--flagfile={mine}", "--batch_size=1", "--",
            "--width_multiplier=2"]
    assert recipes.given_by(argv, names) == {"dataset": "camvid",
                                             "width_multiplier": "camvid"}
    assert recipes.given_by(["tfseg", "--batch_size=2"], names) == {}


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
    # printed as it ends (tfseg.cli.main.end, which ends the process at once).
    code = ("import sys\n"
            "from tfseg.cli import main\n"
            "end = main.end\n"
            "main.end = lambda code: (print('tensorflow' in sys.modules "
            "or 'keras' in sys.modules), end(code))\n"
            "sys.argv = ['tfseg', '--mode=recipes']\n"
            "main.run()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=cli.main_env(), cwd=cli.ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(NAMES) + 1 and lines[-1] == "False", proc.stdout


def _folder_of_recipes(tmp_path, monkeypatch, **files):
    """A recipes folder holding ``NAME.flags`` with each of ``files``' bytes, in place of
    the package's."""
    folder = tmp_path / "recipes"
    folder.mkdir()
    for name, data in files.items():
        (folder / f"{name}.flags").write_bytes(data)
    monkeypatch.setattr(recipes, "FOLDER", str(folder))
    return folder


def test_a_flagfile_or_recipe_that_is_not_utf8_is_one_line_naming_the_file_and_line(
        tmp_path, monkeypatch):
    """A Latin-1 "café" in a comment was a 29-line UnicodeDecodeError, exit 1."""
    latin = tmp_path / "latin.flags"
    latin.write_bytes("# my settings\n# café au lait\n--batch_size=3\n".encode("latin-1"))
    line = _one_error_line(_main(f"--flagfile={latin}", "--mode=validate"))
    assert line == (f"tfseg: error: {latin}: line 2 is not UTF-8 (byte 0xe9 after "
                    f"'# caf'); save it as UTF-8")
    # A recipe, and a user's flagfile starting from it: the recipe's file is named.
    folder = _folder_of_recipes(tmp_path, monkeypatch, base=latin.read_bytes())
    mine = tmp_path / "mine.flags"
    mine.write_text("--recipe=base\n--batch_size=4\n")
    for args in (["--recipe=base"], [f"--flagfile={mine}"]):
        line = _one_error_line(_main(*args, "--mode=validate"))
        assert line.startswith(f"tfseg: error: {folder}/base.flags: line 2 is not UTF-8"), line


def test_a_byte_order_mark_at_the_start_is_read_as_nothing(tmp_path, monkeypatch):
    """absl took it for part of the first line: "unexpected arguments: \\ufeff# ..."."""
    bom = "\ufeff".encode()
    for first in ("# mine\n--batch_size=3\n", "--batch_size=3\n"):
        mine = tmp_path / "mine.flags"
        mine.write_bytes(bom + first.encode())
        assert _settings(_main(f"--flagfile={mine}", "--mode=validate"))["batch_size"] == 3
    _folder_of_recipes(tmp_path, monkeypatch, marked=bom + b"# with a mark\n--batch_size=5\n")
    assert _settings(_main("--recipe=marked", "--mode=validate"))["batch_size"] == 5
    assert recipes.table() == "marked  with a mark"


def test_an_empty_recipe_or_flagfile_is_refused_not_read_as_the_next_argument():
    for args in (["--recipe=", "--batch_size=2"], ["--batch_size=2", "--recipe="],
                 ["-recipe=", "--batch_size=2"]):
        line = _one_error_line(_main(*args, "--mode=validate"))
        assert line.startswith("tfseg: error: --recipe: needs a name (--recipe=NAME): one "
                               "of camvid, "), (args, line)
    # absl read an empty --flagfile= as no file at all.
    assert _one_error_line(_main("--flagfile=", "--mode=validate")) == \
        "tfseg: error: --flagfile: needs a file (--flagfile=FILE)"


def test_a_flagfile_that_reads_itself_is_one_line(tmp_path):
    """absl printed a warning and went on without the file's flags."""
    loop = tmp_path / "loop.flags"
    loop.write_text(f"--batch_size=3\n--flagfile={loop}\n")
    assert _one_error_line(_main(f"--flagfile={loop}", "--mode=validate")) == \
        f"tfseg: error: --flagfile: {loop} reads itself; remove its --flagfile line"


def test_a_damaged_recipe_is_listed_with_what_is_wrong_and_the_others_as_before(
        tmp_path, monkeypatch):
    """One recipe that was not UTF-8 made --mode=recipes a traceback for all of them."""
    folder = _folder_of_recipes(tmp_path, monkeypatch,
                                alpha=b"# the first\n--batch_size=2\n",
                                broken="# caf\xe9\n".encode("latin-1"),
                                zulu=b"# the last\n--batch_size=3\n")
    (folder / "folder.flags").mkdir()  # not a file at all
    proc = _main("--mode=recipes")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "alpha   the first",
        "broken  (damaged: line 1 is not UTF-8 (byte 0xe9 after '# caf'); --recipe=broken "
        "cannot be read)",
        "folder  (damaged: Is a directory; --recipe=folder cannot be read)",
        "zulu    the last"]
