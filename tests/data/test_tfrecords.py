import numpy as np
import pytest

from tfseg.data import (DataConfig, build_dataset, cityscapes, read_tfrecords, voc,
                        write_tfrecords)
from tests.data.trees import voc_tree


def _batches(config, training=False):
    return [(i.numpy(), l.numpy()) for i, l in build_dataset(config, training)]


@pytest.mark.parametrize("raw", [False, True])
def test_round_trip_equals_png_pipeline(synthetic_root, tmp_path, raw):
    source = cityscapes.source(synthetic_root, "train")
    shards = write_tfrecords(source, str(tmp_path), "train", num_shards=4, raw=raw)
    assert len(shards) == 4
    png = _batches(DataConfig(dataset="cityscapes", root=synthetic_root, batch_size=4))
    rec = _batches(DataConfig(dataset="tfrecord", root=str(tmp_path), batch_size=4))
    assert len(png) == len(rec) == 2
    for (a, b), (c, d) in zip(png, rec):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
    # Training reads the shards too, with the same crop contract.
    config = DataConfig(dataset="tfrecord", root=str(tmp_path), crop_size=(32, 40),
                        batch_size=2, seed=0)
    image, label = _batches(config, training=True)[0]
    assert image.shape == (2, 32, 40, 3) and label.shape == (2, 32, 40)


def test_jpeg_images_round_trip_bit_exact(tmp_path):
    expected = voc_tree(tmp_path / "voc")
    write_tfrecords(voc.source(str(tmp_path / "voc"), "train"), str(tmp_path / "rec"), "train")
    for (image, label), want in zip(read_tfrecords(str(tmp_path / "rec"), "train"), expected):
        np.testing.assert_array_equal(label.numpy(), want)
        assert image.shape == want.shape + (3,)


def test_missing_shards_are_named(tmp_path):
    with pytest.raises(ValueError, match=str(tmp_path)):
        read_tfrecords(str(tmp_path), "val")
