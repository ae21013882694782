"""docs/cli.md, generated from the config: every flag, by section, with its default and help.

    python -m tfseg.config.doc > docs/cli.md

The page is made from ``SECTIONS`` and each field's metadata (the same source
the command defines its flags from), so it cannot drift from the flags without
tests/test_docs.py noticing. No TensorFlow.
"""

import dataclasses
import sys

from tfseg.config.config import Config
from tfseg.config.sections import SECTIONS

COMMAND = "python -m tfseg.config.doc > docs/cli.md"


def default_text(value):
    """A default as it would be written on the command line."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(map(str, value)) if value else "(empty)"
    if value == "":
        return "(empty)"
    return str(value)


def _cell(text):
    """One table cell: one line, RST's double backquotes as markdown's, pipes escaped."""
    return " ".join(str(text).split()).replace("``", "`").replace("|", "\\|")


def _intro(cls):
    """The first paragraph of a section's docstring, on one line."""
    return _cell((cls.__doc__ or "").strip().split("\n\n")[0])


def markdown():
    """The page's text."""
    defaults = Config().flat()
    lines = [
        "# Command-line flags",
        "",
        f"Generated from `tfseg.config.Config` by `{COMMAND}`: do not edit by hand.",
        "",
        "Every flag of the `tfseg` command (`python main.py` in a checkout) is a field of one",
        "config section, with the default and help below. Flags may also come from a file",
        "(`--flagfile=FILE`, one `--flag=value` a line) or a recipe shipped with tfseg",
        "(`--recipe=NAME`: `tfseg/recipes/NAME.flags`, `flags/` in a checkout; `--mode=recipes`",
        "lists them); a flag given after either wins.",
        "`--mode=validate` prints the resolved config (what `MODEL_DIR/config.json` saves)",
        "without importing TensorFlow; `tfseg --help` lists the modes and these flags by",
        "section; `--verbose` also shows TensorFlow's start-up and INFO lines. Booleans take",
        "`--name` / `--noname`; lists are comma-separated (`--crop_size=513,513`). In Python",
        "the same names make a config: `tfseg.Config.from_flat(crop_size=(513, 513),",
        "batch_size=2)`, or are keyword arguments of `tfseg.train`, `evaluate`, `predict`",
        "and `export`. Each is parsed and checked as its flag is (a Python value: an int, a",
        "list or tuple, a `pathlib.Path`; or the flag's text: `crop_size=\"513,513\"`), and a",
        "wrong one raises `tfseg.errors.InputError` naming the flag before anything runs.",
        "",
    ]
    for section, cls in SECTIONS.items():
        lines += [f"## {section}", "", _intro(cls), "", "| flag | default | help |",
                  "| --- | --- | --- |"]
        for field in dataclasses.fields(cls):
            flag = field.metadata["flag"] or field.name
            default = _cell(default_text(defaults[flag]))
            default = default if default == "(empty)" else f"`{default}`"
            lines.append(f"| `--{flag}` | {default} | {_cell(field.metadata['help'])} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(markdown())
