"""The documentation: docs/cli.md is the config's, links lead somewhere, the README stays short.

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
