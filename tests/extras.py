"""Tests that need an optional extra (setup.cfg's ``export``, ``hub``): marked ``extra``
and skipped, naming the extra, where it is not installed. The README's install has
none of them, so its test command skips these; ``.ci/run`` runs the fast tier on exactly
that install, then installs the extras and runs ``-m "(slow or extra) and not full"``.

Example::

    from tests.extras import needs

    @needs("export", "tf2onnx", "onnxruntime")
    def test_the_onnx_file_runs(): ...

    pytestmark = needs("hub", "keras_hub").marks   # a whole module
"""

import importlib.util

import pytest

# The command that installs each extra (keras-hub itself goes in without its
# dependencies: docs/testing.md#keras-hub).
INSTALL = {
    "export": 'pip install -e ".[export]"',
    "hub": 'pip install -e ".[hub]" && pip install --no-deps keras-hub==0.32.0',
}


def missing(*modules):
    """The modules of `modules` that cannot be imported here."""
    return [module for module in modules if importlib.util.find_spec(module) is None]


def needs(extra, *modules):
    """A decorator for a test that imports `modules`, which the `extra` installs: it marks
    the test ``extra`` and skips it, naming the missing modules and the extra's install
    command, where any is missing. Its ``marks`` are the same for ``pytestmark``."""
    absent = missing(*modules)
    reason = (f"needs {', '.join(absent)} (the {extra!r} extra: {INSTALL[extra]})"
              if absent else "")
    marks = [pytest.mark.extra, pytest.mark.skipif(bool(absent), reason=reason)]

    def decorate(test):
        for mark in marks:
            test = mark(test)
        return test

    decorate.marks = marks
    return decorate
