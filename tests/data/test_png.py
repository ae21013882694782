import io
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image, PngImagePlugin

from tests.command import ROOT
from tfseg.data import png


def _png_bytes(tmp_path, array, mode=None, palette=None):
    im = Image.fromarray(array, mode)
    if palette is not None:
        im.putpalette(palette)
    path = tmp_path / "x.png"
    im.save(path)
    return path.read_bytes()


def test_crc32_matches_zlib():
    data = np.random.default_rng(0).integers(0, 256, 17)
    assert int(png.crc32(tf.constant(data, tf.int64))) == zlib.crc32(bytes(data.tolist()))


def test_header_fields(tmp_path):
    contents = _png_bytes(tmp_path, np.zeros((7, 11, 3), np.uint8))
    hdr = {k: v.numpy() for k, v in png.header(tf.constant(contents)).items()}
    assert hdr == dict(is_png=True, height=7, width=11, bit_depth=8, colour_type=png.RGB)
    assert not png.header(tf.constant(b"not a png at all")).get("is_png").numpy()
    assert not png.header(tf.constant(b"")).get("is_png").numpy()


def test_palette_indices_not_colours_with_duplicate_palette_entries(tmp_path):
    rng = np.random.default_rng(1)
    index = rng.integers(0, 256, (9, 13)).astype(np.uint8)
    # Every colour used twice: a colour -> index lookup could not get this right.
    palette = np.repeat(rng.integers(0, 256, (128, 3)), 2, axis=0).reshape(-1).tolist()
    contents = _png_bytes(tmp_path, index, "P", palette)
    assert png.is_index_png(png.header(tf.constant(contents))).numpy()
    np.testing.assert_array_equal(png.decode_index_png(tf.constant(contents)).numpy(), index)


@pytest.mark.parametrize("colours", [2, 3, 16])
def test_small_palettes_with_sub_byte_depth(tmp_path, colours):
    index = (np.arange(6 * 10).reshape(6, 10) % colours).astype(np.uint8)
    contents = _png_bytes(tmp_path, index, "P", list(range(3 * colours)))
    assert png.header(tf.constant(contents))["bit_depth"].numpy() < 8  # PIL packs small palettes
    np.testing.assert_array_equal(png.decode_index_png(tf.constant(contents)).numpy(), index)


def test_grayscale_ids_pass_through(tmp_path):
    ids = np.arange(256, dtype=np.uint8).reshape(16, 16)
    contents = _png_bytes(tmp_path, ids, "L")
    np.testing.assert_array_equal(png.decode_index_png(tf.constant(contents)).numpy(), ids)


def test_format_checks(tmp_path):
    def check(array, mode=None):
        hdr = png.header(tf.constant(_png_bytes(tmp_path, array, mode)))
        return bool(png.is_index_png(hdr)), bool(png.is_colour_png(hdr))

    assert check(np.zeros((4, 4), np.uint8)) == (True, False)
    assert check(np.zeros((4, 4, 3), np.uint8)) == (False, True)
    assert check(np.zeros((4, 4, 4), np.uint8)) == (False, True)
    assert check(np.zeros((4, 4), np.uint16)) == (False, False)  # 16-bit gray


def _chunk_types(contents):
    types, offset = [], 8
    while offset < len(contents):
        size = int.from_bytes(contents[offset:offset + 4], "big")
        types.append(contents[offset + 4:offset + 8])
        data = contents[offset + 4:offset + 8 + size]
        assert contents[offset + 8 + size:offset + 12 + size] == zlib.crc32(data).to_bytes(4, "big")
        offset += 12 + size
    return types


def _palette_png_with_extras(index):
    # What VOC's and PIL's labels hold: a PLTE, a tRNS (transparency) and text chunks.
    im = Image.fromarray(index, "P")
    im.putpalette(list(range(256)) * 3)
    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", "labels")
    buffer = io.BytesIO()
    im.save(buffer, format="PNG", transparency=0, pnginfo=info)
    return buffer.getvalue()


def test_palette_chunks_are_dropped_and_the_indices_kept():
    # libpng warns for each palette chunk of a file read as grayscale, once per label read.
    index = (np.arange(9 * 13).reshape(9, 13) % 21).astype(np.uint8)
    contents = _palette_png_with_extras(index)
    assert {b"PLTE", b"tRNS"} <= set(_chunk_types(contents))
    gray = png.palette_as_grayscale(tf.constant(contents)).numpy()
    assert _chunk_types(gray) == [b"IHDR", b"IDAT", b"IEND"]  # and every CRC right
    assert gray[25] == png.GRAY
    np.testing.assert_array_equal(png.decode_index_png(tf.constant(contents)).numpy(), index)
    # The same in the tf.data graph, where the pipeline runs it.
    decoded = tf.data.Dataset.from_tensors(contents).map(png.decode_index_png)
    np.testing.assert_array_equal(next(iter(decoded)).numpy(), index)


def test_decoding_a_palette_label_logs_no_png_warning(tmp_path):
    index = (np.arange(6 * 10).reshape(6, 10) % 21).astype(np.uint8)
    path = tmp_path / "label.png"
    path.write_bytes(_palette_png_with_extras(index))
    code = ("import sys, tensorflow as tf; from tfseg.data import png; "
            "print(png.decode_index_png(tf.io.read_file(sys.argv[1])).numpy().sum())")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0", PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) == int(index.sum())
    assert "PNG warning" not in proc.stderr
