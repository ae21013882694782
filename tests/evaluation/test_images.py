"""Predict's image reader (tfseg/evaluation/images.py): every kind of file read as its 8-bit
RGB twin (tests/evaluation/twins.py), or refused in one line naming the file."""

import os

import numpy as np
import pytest
from PIL import Image

from tests.evaluation import twins
from tfseg.errors import InputError
from tfseg.evaluation.images import read_rgb
from tfseg.evaluation.predict import list_images


@pytest.mark.parametrize("kind", sorted(twins.KINDS))
def test_each_kind_is_read_as_its_8_bit_rgb_twin(tmp_path, kind):
    path, twin, tolerance = twins.write(str(tmp_path), kind)
    rgb = read_rgb(path)
    assert rgb.dtype == np.uint8 and rgb.shape == twin.shape, (rgb.dtype, rgb.shape)
    assert np.abs(rgb.astype(int) - twin).max() <= tolerance


def test_16_bit_values_are_scaled_by_dropping_the_low_byte_not_clipped(tmp_path):
    values = np.arange(0, 65536, 64, dtype=np.uint16).reshape(32, 32)
    Image.fromarray(values).save(tmp_path / "gray16.png")
    twins.png16(tmp_path / "rgb16.png", np.stack([values, values.T, 65535 - values], -1))
    expected = (values >> 8).astype(np.uint8)  # as libpng's strip_16, so as the pipeline
    np.testing.assert_array_equal(read_rgb(str(tmp_path / "gray16.png")),
                                  np.repeat(expected[..., None], 3, -1))
    np.testing.assert_array_equal(read_rgb(str(tmp_path / "rgb16.png")),
                                  np.stack([expected, expected.T, 255 - expected], -1))


def _one_line_refusal(path, *pieces):
    with pytest.raises(InputError) as error:
        read_rgb(path)
    message = str(error.value)
    assert "\n" not in message and message.isprintable(), message
    for piece in pieces:
        assert piece in message, message
    return message


@pytest.mark.parametrize("content", [b"", b"not an image at all", "truncated"])
def test_an_unreadable_file_is_refused_in_one_line_naming_it(tmp_path, content):
    path = str(tmp_path / "bad.png")
    if content == "truncated":
        twins.write(str(tmp_path), "rgb8", "bad.png")
        content = open(path, "rb").read()[:200]
    open(path, "wb").write(content)
    _one_line_refusal(path, f"cannot read image {path}")


def test_a_missing_file_or_a_folder_is_refused_in_one_line_naming_it(tmp_path):
    _one_line_refusal(str(tmp_path / "missing.png"), str(tmp_path / "missing.png"))
    _one_line_refusal(str(tmp_path), str(tmp_path))


@pytest.mark.parametrize("mode, values", [("F", np.float32(0.5)), ("I", np.int32(70000))])
def test_32_bit_images_are_refused_naming_the_mode(tmp_path, mode, values):
    """A float or 32-bit integer image (a TIFF) has no one 8-bit reading: refused."""
    path = str(tmp_path / "deep.tif")
    Image.fromarray(np.full(twins.SIZE, values)).save(path)
    assert Image.open(path).mode == mode
    _one_line_refusal(path, path, f"mode {mode}")


def test_an_image_over_pils_pixel_limit_is_refused_in_one_line(tmp_path, monkeypatch):
    path, _, _ = twins.write(str(tmp_path), "rgb8")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # 24 x 32 is over twice that
    _one_line_refusal(path, path, "pixels")


def test_a_non_utf_8_file_name_is_read_and_named_readably(tmp_path):
    """On Linux a name is bytes: b"caf\\xe9.png" (Latin-1) is no UTF-8. Listed, it comes
    back as a str with a surrogate; both forms read, and a refusal names it printably."""
    folder = os.fsencode(tmp_path / "in")
    os.mkdir(folder)
    name = os.path.join(folder, b"caf\xe9.png")
    with open(name, "wb") as f:
        Image.fromarray(twins.TWIN).save(f, format="PNG")
    listed, = list_images(os.fsdecode(folder))
    assert os.fsencode(listed) == name
    np.testing.assert_array_equal(read_rgb(listed), twins.TWIN)
    np.testing.assert_array_equal(read_rgb(name), twins.TWIN)
    with open(name, "wb") as f:
        f.write(b"damaged")
    message = _one_line_refusal(listed, "caf\\xe9.png")
    message.encode("utf-8")  # printable anywhere: no lone surrogate
