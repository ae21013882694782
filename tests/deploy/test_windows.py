"""tfseg.deploy.windows: a fixed-size .tflite at any image size, padded and run in windows
as --eval_mode=sliding does, never stretched."""

import numpy as np
import pytest
import tensorflow as tf

from tfseg.deploy import Request, tflite
from tfseg.deploy.serving import INPUT, frozen_function
from tfseg.deploy.windows import grey, stride_for, windowed
from tfseg.evaluation.inference import InferenceConfig, Predictor
from tfseg.models import deeplab_v3_plus

SIZE = (33, 49)  # the file's size: neither a multiple of the output stride nor one more
SIZES = InferenceConfig(size_multiple=16)
# Smaller, larger, and of the other aspect (taller than the file, narrower).
IMAGES = {"smaller": (20, 30), "larger": (70, 101), "other_aspect": (80, 25)}


def _red(x):
    """A model of no context: each pixel's class is its red value (and logits to match)."""
    red = np.asarray(x)[..., 0].astype(np.int32) % 7
    return {"classes": red, "logits": 10.0 * np.eye(7, dtype=np.float32)[red]}


@pytest.mark.parametrize("logits", [True, False], ids=["averaged", "deepest"])
@pytest.mark.parametrize("shape", [*IMAGES.values(), SIZE], ids=[*IMAGES, "its_own"])
def test_every_pixel_is_placed_back_where_it_came_from(shape, logits):
    """Padding, windows and cropping put each window's output back on its own pixels,
    whichever way the windows are combined."""
    image = np.random.RandomState(1).randint(0, 256, (1, *shape, 3)).astype(np.uint8)

    def run(x):
        assert x.shape == (1, *SIZE, 3) and x.dtype == np.uint8  # the file's size only
        out = _red(x)
        return out if logits else {"classes": out["classes"]}

    np.testing.assert_array_equal(windowed(run, SIZE, image), image[..., 0] % 7)


@pytest.fixture(scope="module")
def exported():
    """(a tiny DeepLabv3+ of random weights, its .tflite at SIZE, one without logits)."""
    model = deeplab_v3_plus(5, width_multiplier=0.125, middle_repeats=1)
    with_logits = tflite.convert(model, Request(size=SIZE, sizes=SIZES))
    serve = frozen_function(model, [1, *SIZE, 3], False, SIZES)
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [serve.get_concrete_function()], tf.Module())
    return model, with_logits, converter.convert()


def _runner(content):
    signature = tf.lite.Interpreter(model_content=content).get_signature_runner()
    return lambda x: signature(**{INPUT: x})


@pytest.mark.parametrize("shape", IMAGES.values(), ids=IMAGES)
def test_the_file_gives_the_checkpoints_sliding_classes_at_any_size(exported, shape):
    """What the .tflite gives at a size it does not take is what eval's sliding mode gives
    from the model with its windows (a stretched image agreed on 70-96% of pixels). The
    reference pads with the same checkerboard: random weights leave classes nearly tied,
    which eval's padding of exactly 0 would tip (the trained model's agreement with it
    is tests/deploy/test_exact_sizes.py's)."""
    model, with_logits, without = exported
    image = np.random.RandomState(2).randint(0, 256, (1, *shape, 3)).astype(np.uint8)
    sliding = Predictor(model, InferenceConfig(mode="sliding", crop=SIZE,
                                               stride=stride_for(SIZE), size_multiple=16))
    padded = grey(max(shape[0], SIZE[0]), max(shape[1], SIZE[1]))
    padded[:, :shape[0], :shape[1]] = image
    want = sliding.classes(padded).numpy()[:, :shape[0], :shape[1]]
    got = windowed(_runner(with_logits), SIZE, image)
    assert got.shape == (1, *shape) and np.mean(got == want) >= 0.999
    # A file of before the logits output: each pixel from its deepest window.
    assert np.mean(windowed(_runner(without), SIZE, image) == want) >= 0.9


def test_every_tflite_has_the_logits_that_windows_average(exported):
    details = tf.lite.Interpreter(model_content=exported[1]).get_signature_runner() \
        .get_output_details()
    assert sorted(details) == ["classes", "logits"]


def test_the_client_code_in_docs_export_md_gives_what_predict_gives(exported):
    """docs/export.md's few lines for a client, run on the real file."""
    import os
    import re

    from tests.command import ROOT

    with open(os.path.join(ROOT, "docs", "export.md"), encoding="utf-8") as f:
        code = re.search(r"```python\n(import numpy as np\n\ndef classify.*?)```", f.read(),
                         re.S).group(1)
    namespace = {}
    exec(code, namespace)  # noqa: S102 (the documented code itself)
    run = _runner(exported[1])
    for shape in [*IMAGES.values(), SIZE]:
        image = np.random.RandomState(3).randint(0, 256, (*shape, 3)).astype(np.uint8)
        np.testing.assert_array_equal(namespace["classify"](run, image, *SIZE),
                                      windowed(run, SIZE, image[np.newaxis])[0])


def test_a_conversion_that_works_writes_nothing_to_stderr():
    """TF's converter wrote "Ignored output_format.", "Ignored drop_control_dependency."
    and more from C++ on every export (ten lines with int8 calibration). A process of its
    own: the tests' TF_CPP_MIN_LOG_LEVEL=3 hides those lines here."""
    import os
    import subprocess
    import sys

    from tests.command import ROOT

    script = ("from tfseg.deploy import Request, tflite\n"
              "from tfseg.models import deeplab_v3_plus\n"
              "model = deeplab_v3_plus(3, width_multiplier=0.125, middle_repeats=1)\n"
              "tflite.convert(model, Request(size=(16, 16)))\n")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # What TensorFlow writes as it loads is the command's to sort (tfseg.cli.quiet).
    assert "Ignored output_format" not in proc.stderr, proc.stderr[-3000:]
    assert "Ignored drop_control_dependency" not in proc.stderr, proc.stderr[-3000:]
