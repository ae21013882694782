"""The export formats' registry: the formats registered are --export_format's names, and a
format whose converter is not installed is refused before any work, naming the extra."""

import pytest

from tfseg.config.names import EXPORT_FORMATS
from tfseg.deploy import EXPORTERS, EXTRA, Exporter, open_model
from tfseg.errors import InputError


def test_registered_formats_are_the_flags_names():
    assert set(EXPORTERS) == set(EXPORT_FORMATS)
    entries = [entry for exporter in EXPORTERS.values() for entry in exporter.entries]
    assert len(entries) == len(set(entries))  # no two formats write the same file


def test_every_format_stores_and_reads_its_classes():
    assert all(e.write_labels and e.read_labels and e.accepts for e in EXPORTERS.values())


def test_a_missing_converter_names_the_extra():
    # One module missing and one always there (json), so that what is installed (the
    # README's install has no onnx) does not change the message.
    exporter = Exporter("onnx", ("model.onnx",), write=None,
                        needs=("tfseg_no_such_module_a", "json"))
    with pytest.raises(InputError) as error:
        exporter.require()
    assert str(error.value) == ('--export_format=onnx needs tfseg_no_such_module_a, which is '
                                'not installed: pip install "tfseg[export]"')
    assert EXTRA in str(error.value) and "\n" not in str(error.value)


def test_only_onnx_needs_the_extra():
    assert {name for name, e in EXPORTERS.items() if e.needs} == {"onnx"}


def test_a_converter_that_fails_on_import_is_one_line_naming_it(tmp_path, monkeypatch):
    # A real module that raises on import, as a tf2onnx beside an onnx of the wrong
    # version does (it was a traceback, exit 1).
    (tmp_path / "tfseg_broken_converter.py").write_text(
        "raise AttributeError(\"module 'onnx' has no attribute 'mapping'\\nmore\")\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    exporter = Exporter("onnx", ("model.onnx",), write=None,
                        needs=("json", "tfseg_broken_converter"))
    with pytest.raises(InputError) as error:
        exporter.require()
    assert str(error.value) == (
        "--export_format=onnx: tfseg_broken_converter is installed but fails on import "
        "(AttributeError: module 'onnx' has no attribute 'mapping'); reinstall it: "
        'pip install "tfseg[export]"')


@pytest.mark.parametrize("runtime,message", [
    ("tfseg_no_such_runtime", "--model_path: running {} needs tfseg_no_such_runtime, which is "
                              'not installed: pip install "tfseg[export]"'),
    ("tfseg_broken_runtime", "--model_path: running {}: tfseg_broken_runtime is installed but "
                             "fails on import (ImportError: no runtime here); reinstall it: "
                             'pip install "tfseg[export]"')])
def test_a_file_whose_runtime_is_missing_or_broken_is_refused_as_a_converter_is(
        tmp_path, monkeypatch, runtime, message):
    # predict's runtimes are checked in the words of --export_format's converters.
    (tmp_path / "tfseg_broken_runtime.py").write_text("raise ImportError('no runtime here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = str(tmp_path / "model.fake")
    open(path, "wb").close()
    monkeypatch.setitem(EXPORTERS, "fake", Exporter(
        "fake", ("model.fake",), write=None, accepts=lambda p: p.endswith(".fake"),
        open=lambda p: None, open_needs=("json", runtime)))
    with pytest.raises(InputError) as error:
        open_model(path)
    assert str(error.value) == message.format(path)
