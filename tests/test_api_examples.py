"""The examples of ``tfseg``'s and ``tfseg.api``'s docstrings, as written: each call's
settings are ones its mode accepts and no export writes over another (fast), and the
examples run, in order, in a fresh folder (slow: they train the synthetic default for
20 steps)."""

import ast
import inspect
import textwrap

import numpy as np
import pytest

import tfseg
from tfseg import api
from tfseg.api import config_of

# Whose examples run, in the order a user would run them: export before predict, which
# reads the export.
DOCUMENTED = (tfseg, api, api.train, api.evaluate, api.export, api.predict)
MODES = ("train", "evaluate", "export", "predict")


def example(documented):
    """The code of the "Example:" block of ``documented``'s docstring, dedented."""
    lines = inspect.getdoc(documented).split("Example:\n", 1)[1].splitlines()
    block = []
    for line in lines:
        if not line.strip():
            break
        block.append(line)
    return textwrap.dedent("\n".join(block))


def mode_calls():
    """(mode, keyword arguments) of each ``tfseg.MODE(...)`` call of the examples."""
    for documented in DOCUMENTED:
        for node in ast.walk(ast.parse(example(documented))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in MODES):
                yield node.func.attr, {k.arg: ast.literal_eval(k.value) for k in node.keywords}


def test_every_example_call_has_settings_its_mode_accepts():
    """``tfseg.train(train_steps=20)`` was refused: the default --warmup_steps (25) must
    be below --train_steps."""
    calls = list(mode_calls())
    assert {mode for mode, _ in calls} == set(MODES)
    for _, settings in calls:
        config_of(**settings)


def test_no_example_export_writes_over_another():
    """The tflite export went to the first export's folder, refused as not empty (with
    overwrite, it would have replaced the first export's files)."""
    folders = [config_of(**settings).run for mode, settings in mode_calls() if mode == "export"]
    folders = [run.export_dir or f"{run.model_dir}/export" for run in folders]
    assert len(folders) == 2 and len(set(folders)) == len(folders)
    read = [settings["model_path"] for mode, settings in mode_calls()
            if mode == "predict" and "model_path" in settings]
    assert read and all(any(path.startswith(f"{f}/") for f in folders) for path in read)


@pytest.mark.slow
def test_the_examples_run_as_written(tmp_path, monkeypatch):
    from PIL import Image

    monkeypatch.chdir(tmp_path)
    # The user's own image, which the predict example reads.
    pixels = np.random.default_rng(0).integers(0, 256, (128, 256, 3), dtype=np.uint8)
    Image.fromarray(pixels).save("photo.png")
    namespace = {}
    for documented in DOCUMENTED:
        exec(compile(example(documented), getattr(documented, "__name__", ""), "exec"),
             namespace)
    assert (tmp_path / "runs/try/ckpt-20.index").exists()
    assert (tmp_path / "runs/try/export/model.keras").exists()
    assert (tmp_path / "runs/try/tflite/model.tflite").exists()
    assert list((tmp_path / "out").iterdir()) and list((tmp_path / "out_tflite").iterdir())
