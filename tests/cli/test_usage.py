"""``tfseg --help``: exit 0, the modes and every flag under its section's heading."""

import dataclasses

from tests import command
from tfseg.cli import usage
from tfseg.config import MODES, SECTIONS


def test_help_exits_0_with_every_mode_and_each_section():
    proc = command.run("--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == usage.text() and proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("usage: tfseg ")
    for title in ("data", "model", "training", "evaluation", "run"):
        assert f"{title} flags:" in lines, title
    assert list(usage.MODE_HELP) == list(MODES)
    assert "To add a mode" not in proc.stdout


def test_each_flag_is_listed_under_its_own_section():
    text = usage.text()
    for section, cls in SECTIONS.items():
        start = text.index(f"\n{usage.TITLES[section]} flags:\n")
        end = text.find("\n\n", start + 1)  # the blank line before the next section
        block = text[start:end if end > 0 else None]
        for field in dataclasses.fields(cls):
            assert f"  --{field.metadata['flag'] or field.name}" in block, field.name


def test_help_and_its_absl_spellings_are_the_same_help():
    for spelling in ("-h", "--helpfull", "--helpshort"):
        proc = command.run("--mode=train", spelling)
        assert proc.returncode == 0 and proc.stdout == usage.text(), spelling


def test_a_flag_whose_help_gives_its_default_says_it_once():
    """--data_service's help ends "(default: in-process)": the help adds no second one."""
    entries = usage.text().split("\n  --")
    data_service = next(e for e in entries if e.startswith("data_service "))
    assert data_service.count("default") == 1, data_service
    assert all(entry.count("(default:") <= 1 for entry in entries)
    assert next(e for e in entries if e.startswith("train_steps ")).endswith("(default: 1300)")
