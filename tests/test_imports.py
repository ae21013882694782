"""The layering of tfseg's packages, lowest first; every import at a module's top."""

import ast
import pathlib
import subprocess
import sys

import pytest

import tfseg

ROOT = pathlib.Path(tfseg.__file__).parent
# Lowest first: each package may import only the ones before it. `units` (the byte units)
# imports nothing; `errors`, `config`, `recipes` and `io` import no TensorFlow; `runtime` is
# what training and evaluation share; `keras_graph` holds every read of Keras's private
# attributes, and imports only Keras.
ORDER = ("units", "errors", "config", "recipes", "io", "keras_graph", "layers", "memory", "xla",
         "models", "data", "split", "runtime", "evaluation", "deploy", "training", "profile", "budget",
         "report", "api", "cli")
# Imports inside functions, where they are the point: the profiler's measuring process
# imports TensorFlow only once it runs (its parent may not have it loaded); tfseg.training
# loads its loss on first use, so that the command's lock (tfseg.training.lock) costs no
# TensorFlow; the Python API and the command import a mode's part when it runs, so that
# `import tfseg` and --mode=validate import no TensorFlow; tfseg.memory's post-import
# hook on keras-hub loads keras-hub's entries only once keras-hub is loaded.
LOCAL_OK = {"profile/child.py", "training/__init__.py", "api.py", "cli/modes.py",
            "cli/main.py", "cli/quiet.py", "memory/__init__.py"}


def tfseg_imports(path):
    """(tfseg subpackage or module name, inside a function?) for each import in `path`."""
    tree = ast.parse(path.read_text())
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    functions = [n for n in ast.walk(tree) if isinstance(n, kinds)]
    local = {id(n) for function in functions for n in ast.walk(function)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from tfseg import memory` imports tfseg.memory.
            modules = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            assert not isinstance(node, ast.ImportFrom), f"{path}: relative import"
            continue
        for module in modules:
            parts = module.split(".")
            if parts[0] == "tfseg" and len(parts) > 1:
                found.append((parts[1], id(node) in local))
    return found


@pytest.mark.parametrize("package", ORDER)
def test_package_imports_only_lower_packages_at_module_top(package):
    allowed = set(ORDER[: ORDER.index(package) + 1])
    files = sorted((ROOT / package).glob("*.py")) or [ROOT / f"{package}.py"]
    for path in files:
        for target, local in tfseg_imports(path):
            assert not local or path.relative_to(ROOT).as_posix() in LOCAL_OK, \
                f"{path.name}: imports tfseg.{target} inside a function"
            assert target in allowed, f"{path.name}: tfseg.{package} imports tfseg.{target}"


def test_every_package_has_its_place():
    assert set(ORDER) == {p.stem for p in ROOT.iterdir()
                          if p.stem not in ("__init__", "__pycache__")}


def test_memory_imports_no_models_in_a_fresh_interpreter():
    code = ("import sys, tfseg.memory; "
            "print(sorted(m for m in sys.modules "
            "if m.startswith(('tfseg.models', 'tfseg.training'))))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, timeout=300)
    assert result.stdout.strip() == "[]"
