"""The input pipeline's image decoding (tfseg/data/decode.py, ``decode_image``): every kind
of file decoded as its 8-bit RGB twin (tests/evaluation/twins.py), and as predict's reader
(tfseg/evaluation/images.py) reads it, so that training and predict see the same pixels;
what it cannot read is refused in one line naming the file."""

import os
import struct

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from tests.data.conftest import run_eager_and_in_map
from tests.data.trees import cityscapes_tree
from tests.evaluation import twins
from tfseg.data import cityscapes, pairs_dataset, pairs_to_examples
from tfseg.data.decode import decode_image
from tfseg.data.feed import SKIP_HINT, iterate
from tfseg.errors import InputError
from tfseg.evaluation.images import read_rgb

def _decode(path):
    return run_eager_and_in_map(lambda p: decode_image(tf.io.read_file(p)), path)

@pytest.mark.parametrize("kind", sorted(twins.KINDS))
def test_each_kind_is_decoded_as_its_twin_and_as_predict_reads_it(tmp_path, kind):
    path, twin, tolerance = twins.write(str(tmp_path), kind)
    for image in _decode(path):  # eagerly and inside a dataset's map
        assert image.dtype == np.uint8 and image.shape == twin.shape, (image.dtype, image.shape)
        assert np.abs(image.astype(int) - twin).max() <= tolerance
        np.testing.assert_array_equal(image, read_rgb(path))

def test_16_bit_values_are_scaled_by_dropping_the_low_byte(tmp_path):
    values = np.arange(0, 65536, 64, dtype=np.uint16).reshape(32, 32, 1)
    twins.png16(tmp_path / "rgb16.png", np.concatenate([values, values[::-1], 65535 - values], -1))
    high = (values >> 8).astype(np.uint8)
    for image in _decode(str(tmp_path / "rgb16.png")):
        np.testing.assert_array_equal(image, np.concatenate([high, high[::-1], 255 - high], -1))

def _rle8_bmp(path):
    """An 8-bit BMP compressed with RLE (BI_RLE8): PIL reads it, TF's BMP decoder would
    read its compressed bytes as pixels."""
    rows = b"".join(bytes([4, 1]) + b"\0\0" for _ in range(2)) + b"\0\1"  # 2 rows of 4 x 1
    palette = b"".join(bytes([i, i, i, 0]) for i in range(256))
    info = struct.pack("<IiiHHIIiiII", 40, 4, 2, 1, 8, 1, len(rows), 0, 0, 256, 0)
    offset = 14 + len(info) + len(palette)
    with open(path, "wb") as f:
        f.write(b"BM" + struct.pack("<IHHI", offset + len(rows), 0, 0, offset) + info + palette
                + rows)
    assert np.asarray(Image.open(path)).tolist() == [[1] * 4] * 2

def _refused(tmp_path, write):
    pairs = cityscapes_tree(tmp_path, n=2)
    write(pairs[1][0])
    source = cityscapes.source(str(tmp_path), "train")
    with pytest.raises(InputError) as error:
        list(iterate(pairs_to_examples(pairs_dataset(source.pairs), source, deterministic=True)))
    return pairs[1][0], str(error.value)

@pytest.mark.parametrize("kind", ["tiff", "bilevel_bmp", "rle_bmp"])
def test_an_image_it_cannot_read_is_refused_in_one_line_naming_it(tmp_path, kind):
    """Files PIL reads but TF does not: TIFF, 1-bit BMP, RLE-compressed BMP."""
    write = {"tiff": lambda p: Image.fromarray(twins.TWIN[:12, :16]).save(p, format="TIFF"),
             "bilevel_bmp": lambda p: Image.fromarray(twins.GRAY[:12, :16] > 127).save(
                 p, format="BMP"),
             "rle_bmp": _rle8_bmp}[kind]
    path, message = _refused(tmp_path, write)
    assert message == f"cannot read or decode image file {path}{SKIP_HINT}", message

def test_a_non_utf_8_file_name_is_read_and_a_bad_one_named_in_one_line(tmp_path):
    """On Linux a name is bytes; b"town\\xe9" (Latin-1) is no UTF-8, and ``os.listdir``
    gives it as a str with a surrogate, which no tf.string takes."""
    pairs = cityscapes_tree(tmp_path, n=2)
    twin = np.asarray(Image.open(pairs[1][0]))
    for path in pairs[1]:
        os.rename(path, os.fsencode(path).replace(b"/town_", b"/town\xe9_"))
    source = cityscapes.source(str(tmp_path), "train")
    assert "/town\udce9_000001" in source.pairs[1][0]
    (_, _), (image, _) = pairs_to_examples(pairs_dataset(source.pairs), source)
    np.testing.assert_array_equal(image.numpy(), twin)
    with open(source.pairs[1][0], "wb") as f:
        f.write(b"damaged")
    with pytest.raises(InputError) as error:
        list(iterate(pairs_to_examples(pairs_dataset(source.pairs), source)))
    # Printable: the odd byte is U+FFFD (TF's error messages are UTF-8).
    assert str(error.value) == ("cannot read or decode image file "
                                + source.pairs[1][0].replace("\udce9", "\ufffd") + SKIP_HINT)

def test_training_reads_a_file_whose_name_is_not_utf_8(tmp_path):
    """The training input's own file list (shuffled indices into the pairs)."""
    from tfseg.data import DataConfig, build_dataset

    pairs = cityscapes_tree(tmp_path, n=2)
    for path in pairs[1]:
        os.rename(path, os.fsencode(path).replace(b"/town_", b"/town\xe9_"))
    config = DataConfig(dataset="cityscapes", root=str(tmp_path), split="train",
                        crop_size=(8, 8), batch_size=2)
    images, labels = next(iter(build_dataset(config, training=True)))
    assert images.shape[:3] == (2, 8, 8) and labels.shape == (2, 8, 8)

