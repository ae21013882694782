"""TFRecord conversion and reading, including really corrupted shards."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tfseg.data import (DataConfig, build_dataset, build_dataset_with_stats, cityscapes,
                        read_tfrecords, voc, write_tfrecords)
from tfseg.errors import InputError
from tests.data.trees import cityscapes_tree, voc_tree


def _batches(config, training=False):
    return [(i.numpy(), l.numpy()) for i, l in build_dataset(config, training, epochs=1)]


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


@pytest.mark.slow  # converts and reads back a JPEG set: 53 s in a loaded CI run
def test_jpeg_images_round_trip_bit_exact(tmp_path):
    expected = voc_tree(tmp_path / "voc")
    write_tfrecords(voc.source(str(tmp_path / "voc"), "train"), str(tmp_path / "rec"), "train")
    for (image, label), want in zip(read_tfrecords(str(tmp_path / "rec"), "train"), expected):
        np.testing.assert_array_equal(label.numpy(), want)
        assert image.shape == want.shape + (3,)


def test_missing_shards_are_named(tmp_path):
    with pytest.raises(InputError, match=str(tmp_path)):
        read_tfrecords(str(tmp_path), "val")


def _corrupt_second_record(shard):
    """Flip a byte inside the 2nd record's data (TFRecord: u64 length, u32 CRC, data, u32 CRC)."""
    data = bytearray(open(shard, "rb").read())
    second = 8 + 4 + int.from_bytes(data[:8], "little") + 4
    data[second + 12 + 20] ^= 0xFF
    open(shard, "wb").write(bytes(data))


def _converted(tmp_path, **kwargs):
    pairs = cityscapes_tree(tmp_path / "png", n=4, **kwargs)
    shards = write_tfrecords(cityscapes.source(str(tmp_path / "png"), "train"),
                             str(tmp_path / "rec"), "train", num_shards=2)
    return pairs, shards


def test_metadata_holds_shard_sizes_and_conversion_stats(tmp_path):
    _, shards = _converted(tmp_path, ids=list(range(34)) + [40])
    meta = json.loads((tmp_path / "rec" / "train.json").read_text())
    assert meta["shard_sizes"] == {os.path.basename(s): 2 for s in shards}
    # Id 40 is outside the Cityscapes ids: 12*16/35 of them per image, rounded by the cycle.
    assert meta["conversion_stats"]["unknown_label_examples"] == 4
    assert meta["conversion_stats"]["unknown_label_pixels"] > 0


@pytest.mark.parametrize("damage", ["flipped_byte", "truncated"])
@pytest.mark.parametrize("training", [False, True])
def test_corrupt_record_names_the_shard_and_last_good_file(tmp_path, damage, training):
    pairs, shards = _converted(tmp_path)
    if damage == "flipped_byte":
        _corrupt_second_record(shards[1])
    else:
        data = open(shards[1], "rb").read()
        open(shards[1], "wb").write(data[:len(data) - 10])
    with pytest.raises(tf.errors.DataLossError):  # really corrupt: TF's own error, naming nothing
        list(tf.data.TFRecordDataset(shards[1]))
    config = DataConfig(dataset="tfrecord", root=str(tmp_path / "rec"), crop_size=(8, 8),
                        batch_size=1, seed=0)
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        list(build_dataset(config, training, epochs=1))
    message = str(error.value)
    assert shards[1] in message and "1 of 2 records" in message
    assert pairs[2][0] in message  # the second shard's first (good) record came from it


def test_skip_mode_logs_and_counts_unreadable_records(tmp_path, capfd):
    _, shards = _converted(tmp_path)
    _corrupt_second_record(shards[0])
    config = DataConfig(dataset="tfrecord", root=str(tmp_path / "rec"), batch_size=1,
                        skip_bad_examples=True)
    dataset, stats = build_dataset_with_stats(config, training=False)
    assert len(list(dataset)) == 3
    assert stats.as_dict()["bad_examples"] == 1
    assert shards[0] in capfd.readouterr().err


def test_metadata_without_shard_sizes_is_named(tmp_path):
    _converted(tmp_path)
    path = tmp_path / "rec" / "train.json"
    meta = json.loads(path.read_text())
    del meta["shard_sizes"]
    path.write_text(json.dumps(meta))
    with pytest.raises(InputError, match="train-00000-of-00002.tfrecord"):
        read_tfrecords(str(tmp_path / "rec"), "train")


def _contents(folder):
    return {name: (folder / name).read_bytes() for name in sorted(os.listdir(folder))}


@pytest.mark.slow
def test_a_second_conversion_replaces_the_splits_shards_and_leaves_the_rest(tmp_path):
    """(Before: the 3 old shards stayed beside the 2 new, and the split could not be read.)"""
    cityscapes_tree(tmp_path / "png", n=4)
    source = cityscapes.source(str(tmp_path / "png"), "train")
    out = tmp_path / "rec"
    write_tfrecords(source, str(out), "train", num_shards=3)
    (out / "val.json").write_text("{}")  # another split's
    (out / "notes.txt").write_text("mine")
    shards = write_tfrecords(source, str(out), "train", num_shards=2)
    assert sorted(os.listdir(out)) == sorted(["notes.txt", "train.json", "val.json",
                                              *map(os.path.basename, shards)])
    assert (out / "val.json").read_text() == "{}" and (out / "notes.txt").read_text() == "mine"
    assert len(list(read_tfrecords(str(out), "train"))) == 4


def test_a_conversion_that_fails_keeps_the_previous_one(tmp_path):
    """A bad image half-way: the split's previous shards and metadata as they were, no
    staging folder. (Before: the first shards rewritten, the rest and the JSON old.)"""
    pairs = cityscapes_tree(tmp_path / "png", n=4)
    source = cityscapes.source(str(tmp_path / "png"), "train")
    out = tmp_path / "rec"
    write_tfrecords(source, str(out), "train", num_shards=2)
    before = _contents(out)
    with open(pairs[3][0], "rb+") as image:  # truncated: the last shard's
        image.truncate(60)
    with pytest.raises(InputError, match="cannot read or decode image"):
        write_tfrecords(source, str(out), "train", num_shards=2)
    assert _contents(out) == before
