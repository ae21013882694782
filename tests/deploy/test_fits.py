"""tfseg.deploy.fits: an --export_size whose .tflite conversion would not fit in memory
is refused in one line naming the largest size that fits, before the converter starts
(a huge one was a segmentation fault in TF's graph freezing, exit 139, with the
export's staging folder left behind)."""

import math
import os
import re

import pytest
import tensorflow as tf

from tests.train.conftest import run_main
from tfseg.deploy import Request, tflite
from tfseg.deploy.fits import (INPUT_BYTES_PER_PIXEL, MAX_SIDE, SHARE, available_bytes,
                               largest_size, peak_live_bytes, require_fits)
from tfseg.errors import InputError
from tfseg.evaluation.inference import InferenceConfig
from tfseg.units import GB


def test_a_size_over_half_the_memory_is_refused_naming_the_largest_that_fits():
    with pytest.raises(InputError) as error:
        require_fits((100000, 100000), 3, 16, available=24 * GB)
    assert str(error.value) == (
        "--export_size: 100000,100000 would take about 30.0 GB to convert (3 bytes a "
        "pixel), over half of the 24.0 GB of memory available here; the largest of its "
        "shape that fits is 63232,63232")
    require_fits((63232, 63232), 3, 16, available=24 * GB)  # the size it names fits
    require_fits((63245, 63245), 3, 1, available=24 * GB)  # 12.0 GB: half, just
    with pytest.raises(InputError, match=r"the largest of its shape that fits is 63245,63245$"):
        require_fits((63246, 63246), 3, 1, available=24 * GB)
    # Its shape kept, the sides multiples of the output stride.
    height, width = largest_size((20000, 80000), 152, 12 * GB, 16)
    assert (height % 16, width % 16, round(width / height)) == (0, 0, 4)
    assert height * width * 152 <= 12 * GB < (height + 16) * (width + 64) * 152


def test_a_side_a_tflite_cannot_store_is_refused():
    with pytest.raises(InputError, match=rf"^--export_size: {MAX_SIDE + 1},16: a .tflite "
                                         rf"stores each side as an int32, at most {MAX_SIDE}$"):
        require_fits((MAX_SIDE + 1, 16), 3, available=10**30)


def test_the_peak_of_live_tensors_counts_what_is_alive_at_once():
    @tf.function(input_signature=[tf.TensorSpec([1, 100, 100, 3], tf.uint8)])
    def graph(image):
        x = tf.cast(image, tf.float32)       # 120 kB; the 30 kB image's last reader
        y = x * 2.0                          # 120 kB, read after z is made
        z = tf.concat([x, x], -1)            # 240 kB, x's last reader
        return tf.reduce_sum(y) + tf.reduce_sum(z)
    peak = peak_live_bytes(graph.get_concrete_function().graph)
    assert peak == 120000 + 120000 + 240000  # x, y and z at the concat; the image gone


def test_int8_calibration_counts_the_models_activations():
    """Freezing the graph takes 3 bytes a pixel (the uint8 input that Grappler feeds);
    int8 calibration runs the model: a size that fits the first may not fit the second."""
    from tfseg.models import deeplab_v3_plus

    available = available_bytes()
    if available is None:
        pytest.skip("no MemAvailable to read here")
    model = deeplab_v3_plus(19, width_multiplier=0.125, middle_repeats=1)
    side = int(math.sqrt(available * SHARE / INPUT_BYTES_PER_PIXEL / 20)) // 16 * 16
    request = Request(size=(side, side), sizes=InferenceConfig(size_multiple=16))
    tflite.fits_here(model, request)
    with pytest.raises(InputError) as error:
        tflite.fits_here(model, Request(size=(side, side), quantization="int8",
                                        sizes=InferenceConfig(size_multiple=16)))
    per_pixel = float(re.search(r"\((\d+) bytes a pixel\)", str(error.value)).group(1))
    # The interpreter's measured 176-189 bytes a pixel at this width (fits.py).
    assert 100 <= per_pixel <= 200, str(error.value)


def test_a_huge_export_size_is_one_line_before_the_converter_starts(trained, tmp_path):
    """Four times the memory available, in a process of its own: it was a segmentation
    fault (exit 139) in TF's graph freezing, which left a staging folder behind."""
    available = available_bytes()
    if available is None:
        pytest.skip("no MemAvailable to read here")
    side = math.isqrt(4 * available // INPUT_BYTES_PER_PIXEL) // 16 * 16 + 16
    folder = tmp_path / "export"
    proc = run_main("--mode=export", f"--model_dir={trained[1]}", f"--export_dir={folder}",
                    "--export_format=tflite", f"--export_size={side},{side}", check=False,
                    process=True)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, proc.stderr[-3000:])
    found = re.fullmatch(rf"tfseg: error: --export_size: {side},{side} would take about "
                         r"[\d.]+ GB to convert \(3 bytes a pixel\), over half of the "
                         r"[\d.]+ GB of memory available here; the largest of its shape "
                         r"that fits is (\d+),(\d+)", lines[0])
    assert found, lines[0]
    largest = int(found.group(1))
    assert largest == int(found.group(2)) and largest % 16 == 0
    assert side / 3.5 < largest < side / 2.5  # about half of a quarter: side / 2.8
    assert os.listdir(tmp_path) == []  # no staging folder, no export folder
