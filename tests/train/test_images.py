"""--mode=predict on images of other kinds than 8-bit RGB: a 16-bit grayscale PNG
is read as its 8-bit twin (it was read clipped, nearly white: 63.8% of the labels agreed),
and an input whose file name is not UTF-8 is labelled and written under its name. The
overlays show the pixels predict read (the tiny model's labels may not change with them).
The reader itself is tests/evaluation/test_images.py."""

import os

import numpy as np
from PIL import Image

from tests.train.conftest import run_main


def _pixels(path):
    with Image.open(path) as png:
        return np.asarray(png)


def test_predicts_16_bit_gray_and_a_non_utf_8_name_as_their_8_bit_twins(trained, tmp_path):
    data_dir, model_dir = trained
    folder = os.path.join(data_dir, "leftImg8bit", "val", "synth2")
    first = os.path.join(folder, sorted(os.listdir(folder))[0])
    rgb = np.asarray(Image.open(first).convert("RGB"))
    gray = np.asarray(Image.fromarray(rgb).convert("L"))
    images = os.fsencode(tmp_path / "images")
    os.mkdir(images)
    Image.fromarray(rgb).save(os.path.join(images, b"rgb.png"))
    Image.fromarray(gray).save(os.path.join(images, b"gray8.png"))
    Image.fromarray(gray.astype(np.uint16) * 257).save(os.path.join(images, b"gray16.png"))
    with open(os.path.join(images, b"caf\xe9.png"), "wb") as f:  # Latin-1 "café"
        Image.fromarray(rgb).save(f, format="PNG")
    out = tmp_path / "out"
    run_main("--mode=predict", "--dataset=cityscapes", f"--data_dir={tmp_path / 'no_data'}",
             f"--model_dir={model_dir}", f"--input_path={os.fsdecode(images)}",
             f"--output_dir={out}", "--output_format=colour")
    written = sorted(os.listdir(os.fsencode(out)))
    stems = (b"caf\xe9", b"gray16", b"gray8", b"rgb")
    assert written == sorted(s + k for s in stems for k in (b"_label.png", b"_overlay.png"))
    png = {name: _pixels(os.path.join(os.fsencode(out), name)) for name in written}
    for kind in (b"_label.png", b"_overlay.png"):
        np.testing.assert_array_equal(png[b"gray16" + kind], png[b"gray8" + kind])
        np.testing.assert_array_equal(png[b"caf\xe9" + kind], png[b"rgb" + kind])
