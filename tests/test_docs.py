"""The documentation: docs/cli.md is the config's, links lead somewhere, the README stays short,
every table of figures in docs/benchmarks.md gives its date and command.

No TensorFlow here: the config and its page generator import none.
"""

import pathlib
import re

import pytest

from tfseg.config import doc

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")])
# [text](target) and ![alt](target); the target ends at a space (a title) or ")".
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)[^)]*\)")


def test_cli_page_is_generated_from_the_config():
    page = ROOT / "docs" / "cli.md"
    assert page.read_bytes() == doc.markdown().encode(), (
        f"docs/cli.md is out of date with tfseg.config: regenerate it with `{doc.COMMAND}`")


def _relative_links(page):
    """(line number, target) of each link in `page` to a file of this repository."""
    in_code = False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
        if in_code:
            continue
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL (https:, mailto:) or an anchor in the same page
            yield number, target


def _anchors(page):
    """GitHub's anchors of the headings of a markdown page."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in re.findall(r"^#+ (.*)$", text, flags=re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_point_to_files(page):
    missing = []
    for number, target in _relative_links(page):
        path, _, anchor = target.partition("#")
        linked = page.parent / path
        if not linked.exists():
            missing.append(f"{page.relative_to(ROOT)}:{number}: {target}")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            missing.append(f"{page.relative_to(ROOT)}:{number}: {target} (no such heading)")
    assert not missing, "links to files or headings that do not exist:\n" + "\n".join(missing)


DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
# What runs something: optional VAR=value settings, then one of these programs.
COMMAND = re.compile(r"(?:[A-Za-z_]\w*=\S+\s+)*(?:python3?|tfseg|bash|for)\s")


def figure_tables_without_provenance(text):
    """The tables of a markdown page that lack a date or a command, one line each:
    "SECTION: TABLE'S FIRST LINE (no date|no command)".

    A table is a run of lines starting with "|". Its provenance is the text above it back
    to the nearest heading, paragraph opening in bold (an entry's title: both included)
    or end of the table before it: it must hold a date (YYYY-MM-DD) and a command, that is
    a span in backticks or a line of a fenced block that runs python, python3, tfseg,
    bash or a shell `for` (after any VAR=value settings).

        >>> figure_tables_without_provenance("## A (2026-11-28)\\n`python x.py`\\n| a |")
        []
    """
    missing, section, context, fence, in_table = [], "(top)", [], False, False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and line.startswith("#"):
            section, context, in_table = line.lstrip("#").strip(), [line], False
            continue
        elif not fence and line.startswith("**") and (not context or not context[-1].strip()):
            context, in_table = [line], False
            continue
        elif not fence and line.startswith("|"):
            if not in_table:
                block = "\n".join(context)
                fenced = re.findall(r"```[^\n]*\n(.*?)```", block, re.S)
                prose = re.sub(r"```.*?```", "", block, flags=re.S)
                spans = [" ".join(span.split()) + " " for span in re.findall(r"`([^`]+)`", prose)]
                lines = [line.strip() + " " for code in fenced for line in code.splitlines()]
                why = [what for what, ok in (("no date", DATE.search(block)),
                                             ("no command", any(COMMAND.match(c)
                                                                for c in spans + lines)))
                       if not ok]
                if why:
                    missing.append(f"{section}: {line.strip()} ({', '.join(why)})")
            in_table = True
            continue
        if in_table:
            context, in_table = [], False
        context.append(line)
    return missing


def test_every_figure_table_gives_its_date_and_command():
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    missing = figure_tables_without_provenance(text)
    assert not missing, ("docs/benchmarks.md: tables without a date or a command above them "
                         "(since the heading, entry title or previous table):\n"
                         + "\n".join(missing))
    assert not re.search(r"command (?:was )?not recorded", text), (
        "docs/benchmarks.md: a figure whose command was not recorded: measure it again with "
        "its command, or take it out")


def test_a_table_without_its_command_is_named():
    page = """# Benchmarks

## Measured (2026-11-28)

```
python benchmarks/memory.py --repeats 1
```

| variant | peak |
| --- | --- |
| stock | 3,563 MiB |

**Later**, `--repeats 3` (2026-11-28):

| variant | peak |
| --- | --- |
| stock | 3,560 MiB |

## Undated

`TF_ENABLE_ONEDNN_OPTS=1 python main.py --mode=report`

| part | MiB |
| --- | --- |
"""
    assert figure_tables_without_provenance(page) == [
        "Measured (2026-11-28): | variant | peak | (no command)",
        "Undated: | part | MiB | (no date)"]
    # A fenced line or a span in backticks that runs the command is what counts.
    fixed = page.replace("`--repeats 3`", "`python benchmarks/memory.py\n--repeats 3`")
    assert figure_tables_without_provenance(fixed) == ["Undated: | part | MiB | (no date)"]


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, (f"README.md has {len(lines)} lines (at most 200): move detail "
                               f"to a page under docs/")


@pytest.mark.slow
def test_the_readme_python_snippets_run(tmp_path, monkeypatch):
    """The README's Python blocks, in order, as a user would paste them (training 2 steps
    instead of 300): train, evaluate, export, build, rewrite, load the export."""
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 3 and "train_steps=300" in blocks[0]
    code = "\n".join(blocks).replace("train_steps=300", "train_steps=2, warmup_steps=0")
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["lean"].count_params() == 3_538_984  # MobileNetV2's, kept by the rewrite
    assert namespace["model"].name == "deeplab_v3_plus"  # the export, loaded
    assert (tmp_path / "runs/python/export/model.keras").exists()
    assert len(list((tmp_path / "data/synthetic").rglob("*.png"))) > 0
