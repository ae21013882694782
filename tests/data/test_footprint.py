"""Sizing and bounding an in-memory cache from real files' headers, before any decoding."""

import json
import os
import struct
import zlib

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from tfseg.data import DataConfig, build_dataset, camvid, cityscapes, voc, write_tfrecords
from tfseg.data.decode import decode_image
from tfseg.data.pairs import decode_pairs, pairs_dataset
from tfseg.data.footprint import cgroup_available, decoded_bytes, image_size, mem_available
from tfseg.errors import InputError
from tests.data.test_camvid import _tree as camvid_tree
from tests.data.trees import cityscapes_tree, save, voc_tree


def _images(tmp_path):
    """Real files of every format ``decode_image`` reads, 17 x 23 (height x width)."""
    rgb = np.random.default_rng(0).integers(0, 256, (17, 23, 3), dtype=np.uint8)
    paths = [save(tmp_path / name, rgb) for name in ("a.png", "b.jpg", "c.gif", "d.bmp")]
    paths.append(save(tmp_path / "gray.png", rgb[..., 0]))
    Image.fromarray(rgb[..., 0].astype(np.uint16) * 200).save(tmp_path / "16bit.png")
    # Progressive JPEG with an EXIF segment before the frame header: the walk seeks over it.
    exif = Image.Exif()
    exif[0x010F] = "tfseg test camera"
    Image.fromarray(rgb).save(tmp_path / "p.jpg", progressive=True, exif=exif.tobytes())
    Image.fromarray(rgb).save(tmp_path / "top_down.bmp")
    return paths + [str(tmp_path / n) for n in ("16bit.png", "p.jpg", "top_down.bmp")]


def test_header_sizes_equal_decoded_sizes(tmp_path):
    paths = _images(tmp_path)
    for path in paths:
        decoded = decode_image(tf.io.read_file(path)).shape[:2]
        assert image_size(path) == tuple(decoded) == (17, 23), path
    with open(tmp_path / "p.jpg", "rb") as f:
        assert b"tfseg test camera" in f.read()  # the EXIF segment really is there
    (tmp_path / "junk.png").write_bytes(b"not an image at all")
    (tmp_path / "short.jpg").write_bytes(b"\xff\xd8\xff\xe0\x00")
    assert image_size(str(tmp_path / "junk.png")) is None
    assert image_size(str(tmp_path / "short.jpg")) is None
    os.symlink(tmp_path / "gone.png", tmp_path / "dangling.png")
    assert image_size(str(tmp_path / "dangling.png")) is None  # counted 0, skipped later


def test_a_containers_memory_limit_bounds_the_cache(tmp_path):
    v2 = (str(tmp_path / "memory.max"), str(tmp_path / "memory.current"))
    (tmp_path / "memory.max").write_text("max\n")  # no limit
    (tmp_path / "memory.current").write_text("1000\n")
    assert cgroup_available([v2]) is None
    (tmp_path / "memory.max").write_text("5000\n")
    assert cgroup_available([v2]) == 4000
    v1 = (str(tmp_path / "limit_in_bytes"), str(tmp_path / "usage_in_bytes"))
    (tmp_path / "limit_in_bytes").write_text(f"{2**63 - 4096}\n")  # v1's "no limit"
    (tmp_path / "usage_in_bytes").write_text("1000\n")
    assert cgroup_available([(str(tmp_path / "none"), v2[1]), v1]) is None


def _decoded_nbytes(source):
    examples, _ = decode_pairs(pairs_dataset(source.pairs), source)
    return sum(image.numpy().nbytes + label.numpy().nbytes for image, label, _ in examples)


def test_estimate_equals_the_decoded_bytes_a_cache_holds(tmp_path):
    cityscapes_tree(tmp_path / "cs", size=(17, 23), n=3)  # PNG, uint8 ids: 4 bytes a pixel
    voc_tree(tmp_path / "voc")                             # JPEG images, palette labels
    (tmp_path / "camvid").mkdir()
    camvid_tree(tmp_path / "camvid")                       # colour labels: int32, 7 bytes
    sources = [cityscapes.source(str(tmp_path / "cs"), "train"),
               voc.source(str(tmp_path / "voc"), "train"),
               camvid.source(str(tmp_path / "camvid"), "train")]
    for source, expected in zip(sources, (3 * 17 * 23 * 4, (10 * 14 + 12 * 9) * 4, 6 * 8 * 7)):
        assert decoded_bytes(source) == _decoded_nbytes(source) == expected


def _one_line(error):
    message = str(error.value)
    assert "\n" not in message
    return message


def test_in_memory_cache_over_the_bound_is_refused_before_decoding(tmp_path):
    cityscapes_tree(tmp_path, size=(17, 23), n=3)
    config = DataConfig(root=str(tmp_path), crop_size=(8, 8), batch_size=1, cache=True,
                        cache_max_gb=4e-6)  # 4 kB < 3 * 17 * 23 * 4 = 4692 bytes
    for training in (True, False):
        with pytest.raises(InputError) as error:
            build_dataset(config, training)  # raised here, not when iterating
        message = _one_line(error)
        assert "cityscapes train split in " + str(tmp_path) in message
        for part in ("3 decoded examples", "4.7 kB", "4.0 kB bound (--cache_max_gb=4e-06)",
                     "cache on disk"):
            assert part in message, message
    # Under the bound it caches; a file cache is on disk and has no memory bound.
    assert len(list(build_dataset(DataConfig(root=str(tmp_path), crop_size=(8, 8),
                                             batch_size=1, cache=True, cache_max_gb=5e-6),
                                  True, epochs=1))) == 3
    on_disk = DataConfig(root=str(tmp_path), crop_size=(8, 8), batch_size=1,
                         cache=str(tmp_path / "cache"), cache_max_gb=1e-9)
    assert len(list(build_dataset(on_disk, True, epochs=1))) == 3


def _png_header(height, width):
    """A PNG signature and IHDR (valid CRC) for an 8-bit RGB image of the given size."""
    ihdr = b"IHDR" + struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + ihdr
            + struct.pack(">I", zlib.crc32(ihdr)))


@pytest.mark.skipif(mem_available() is None, reason="no /proc/meminfo")
def test_cache_larger_than_available_memory_is_refused(tmp_path):
    # A header claiming 2^31-1 x 2^31-1 pixels (~18e18 bytes decoded): over any MemAvailable.
    pairs = cityscapes_tree(tmp_path, size=(4, 4), n=1)
    with open(pairs[0][0], "wb") as f:
        f.write(_png_header(2**31 - 1, 2**31 - 1))
    config = DataConfig(root=str(tmp_path), cache=True, cache_max_gb=1e12)
    with pytest.raises(InputError) as error:
        build_dataset(config, training=True)
    assert "bound (MemAvailable in /proc/meminfo)" in _one_line(error)


def test_tfrecord_cache_is_sized_from_the_metadata(tmp_path):
    cityscapes_tree(tmp_path / "cs", size=(17, 23), n=3)
    source = cityscapes.source(str(tmp_path / "cs"), "train")
    out = tmp_path / "rec"
    write_tfrecords(source, str(out), "train", num_shards=2)
    meta = json.loads((out / "train.json").read_text())
    assert meta["pixels"] == 3 * 17 * 23
    config = DataConfig(dataset="tfrecord", root=str(out), crop_size=(8, 8), batch_size=1,
                        cache=True, cache_max_gb=4e-6)
    with pytest.raises(InputError) as error:
        build_dataset(config, training=True)
    assert "tfrecord train split" in _one_line(error) and "4.7 kB" in str(error.value)
    del meta["pixels"]
    (out / "train.json").write_text(json.dumps(meta))
    with pytest.raises(InputError, match="no pixel count") as error:
        build_dataset(config, training=True)
    assert os.path.join(str(out), "train.json") in _one_line(error)


def test_cache_bound_must_be_positive():
    with pytest.raises(InputError, match="cache_max_gb"):
        DataConfig(cache_max_gb=0)
