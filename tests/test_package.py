"""``import tfseg``: instant, no TensorFlow, the front-door names, and enough to load a
``model.keras`` that tfseg wrote (in a fresh process, as a user's script would); an install
outside the checkout carries the recipes."""

import json
import pathlib
import shutil
import subprocess
import sys

import numpy as np

import tfseg
from tests import command
from tfseg import recipes


def _python(code, timeout=120):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=command.main_env(), timeout=timeout)


def test_import_tfseg_imports_no_tensorflow_and_lists_the_front_door():
    proc = _python("import sys, tfseg; print(sorted(tfseg.__all__)); "
                   "print('tensorflow' in sys.modules or 'keras' in sys.modules)")
    names, loaded = proc.stdout.splitlines()
    assert loaded == "False", proc.stderr
    for name in ("Config", "deeplab_v3_plus", "from_research_deeplab", "rewrite", "paying",
                 "train", "evaluate", "predict", "export"):
        assert name in names and callable(getattr(tfseg, name)), name


def test_import_tfseg_alone_reaches_its_parts_by_name():
    """``import tfseg; tfseg.memory.changes(model)`` (the docs' way) raised AttributeError:
    a part loads on first use, as ``import tfseg.memory`` would; a name that is no part
    still raises, and the light parts bring no TensorFlow."""
    proc = _python("import sys, tfseg\n"
                   "print(tfseg.errors.InputError.__name__, tfseg.config.Config.__name__)\n"
                   "print('tensorflow' in sys.modules, 'memory' in dir(tfseg))\n"
                   "print(tfseg.memory.changes.__module__, tfseg.models.DeepLabV3Plus.__name__)\n"
                   "print(hasattr(tfseg, 'nothing'))\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    light, loaded, parts, missing = proc.stdout.splitlines()
    assert light == "InputError Config" and loaded == "False True"
    assert parts.split() == [tfseg.memory.changes.__module__, "DeepLabV3Plus"]
    assert missing == "False"


def test_train_stays_the_function_when_the_training_package_is_loaded():
    import tfseg.training.loop  # noqa: F401  (sets tfseg.training, never tfseg.train)

    assert tfseg.train.__module__ == "tfseg.api"


def test_a_saved_model_keras_loads_after_import_tfseg_alone(tmp_path):
    """tfseg's layers (ResizeLike, the twins) are in the saved model; Keras finds them
    once ``import tfseg`` has run, whichever of tfseg and keras is imported first."""
    model = tfseg.deeplab_v3_plus(3, width_multiplier=0.125, middle_repeats=1,
                                  memory_saving=True)
    path = str(tmp_path / "model.keras")
    model.save(path)
    image = np.random.default_rng(0).uniform(-1, 1, (1, 33, 49, 3)).astype("float32")
    np.save(tmp_path / "image.npy", image)
    np.save(tmp_path / "logits.npy", model.predict(image, verbose=0))
    # tfseg first, keras after: Keras is not there yet when tfseg registers (the other
    # order is this suite's own, where conftest imports keras first).
    proc = _python(
        f"import tfseg, keras, numpy as np\n"
        f"model = keras.models.load_model({path!r})\n"
        f"got = model.predict(np.load({str(tmp_path / 'image.npy')!r}), verbose=0)\n"
        f"print(float(np.abs(got - np.load({str(tmp_path / 'logits.npy')!r})).max()))\n")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert float(proc.stdout.split()[-1]) < 1e-5, proc.stdout


def test_an_install_outside_the_checkout_has_the_recipes(tmp_path):
    """A non-editable install (a wheel built from a copy of the source, no network, no
    dependencies: the venv's) runs --recipe from another folder: the recipes are package
    data, not the checkout's flags/."""
    root = pathlib.Path(command.ROOT)
    source, site, elsewhere = tmp_path / "source", tmp_path / "site", tmp_path / "elsewhere"
    # A copy: the build writes build/ and *.egg-info beside the sources.
    shutil.copytree(root / "tfseg", source / "tfseg", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.cfg", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(root / name, source)
    # No network: no index, the venv's setuptools (no isolated build), no version check.
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                          "--no-index", "--no-build-isolation", "--disable-pip-version-check",
                          "--target", str(site), str(source)],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr[-3000:]
    elsewhere.mkdir()
    env = dict(command.main_env(), PYTHONPATH=str(site))

    def run(argv):
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=elsewhere,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout

    # The console script the install wrote, as a user runs it.
    config = json.loads(run([str(site / "bin" / "tfseg"), "--mode=validate",
                             "--recipe=voc_xception65_os16", "--batch_size=2"]))
    assert config["data"]["dataset"] == "voc" and config["data"]["crop_size"] == [513, 513]
    assert config["optim"]["learning_rate"] == 0.007 and config["data"]["batch_size"] == 2
    # Its entry point again, printing as it ends (tfseg.cli.main.end, which ends the
    # process at once) which tfseg it ran and whether TensorFlow was imported.
    *lines, end = run([sys.executable, "-c", (
        "import sys, tfseg\n"
        "from tfseg.cli import main\n"
        "end = main.end\n"
        "main.end = lambda code: (print(tfseg.__file__, 'tensorflow' in sys.modules), "
        "end(code))\n"
        "sys.argv = ['tfseg', '--mode=recipes']\n"
        "main.run()\n")]).splitlines()
    assert end == f"{site / 'tfseg' / '__init__.py'} False", end
    assert [line.split()[0] for line in lines] == recipes.names()  # every recipe is in the wheel
