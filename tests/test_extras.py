"""The README's test command passes on the README's install: a test that needs an extra's
module carries `tests.extras.needs`, which skips it there, naming the extra."""

import pathlib
import re

import pytest

from tests.extras import INSTALL, needs

TESTS = pathlib.Path(__file__).parent
# Each extra's modules that tests import (setup.cfg's extras_require).
MODULES = {"export": ("onnx", "onnxruntime", "tf2onnx"), "hub": ("keras_hub",)}
_IMPORT = re.compile(r"^\s*(?:import|from)\s+(%s)\b" % "|".join(
    module for modules in MODULES.values() for module in modules), re.MULTILINE)


def test_every_test_file_importing_an_extras_module_marks_its_tests():
    unmarked = [path.relative_to(TESTS).as_posix() for path in sorted(TESTS.rglob("*.py"))
                if path.name != "extras.py" and _IMPORT.search(path.read_text())
                and "needs(" not in path.read_text()]
    assert unmarked == [], f"import an extra's module without tests.extras.needs: {unmarked}"


@pytest.mark.parametrize("extra", sorted(MODULES))
def test_a_missing_module_skips_naming_the_extra_and_its_install(extra):
    marks = needs(extra, "tfseg_no_such_module", "json").marks
    assert [mark.name for mark in marks] == ["extra", "skipif"]
    skip = marks[1]
    assert skip.args == (True,)
    assert skip.kwargs["reason"] == (f"needs tfseg_no_such_module (the {extra!r} extra: "
                                     f"{INSTALL[extra]})")


def test_a_present_module_does_not_skip():
    assert needs("export", "json").marks[1].args == (False,)
