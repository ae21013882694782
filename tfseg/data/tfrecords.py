"""The reader of the sharded TFRecords that ``tfseg.data.convert`` writes
(``write_tfrecords``, importable here too): the ``tfrecord`` data set. Its records hold
labels already mapped to train ids, encoded or raw as the split's ``{split}.json`` says,
so reading needs no per-format logic; a record that cannot be read is named, with its
shard.

Example:
    examples = read_tfrecords("data/tfrecords", "val")   # (image, label), source order
"""

import glob
import json
import os
import sys

import numpy as np
import tensorflow as tf

# write_tfrecords: re-exported, `tfseg.data` takes it from here.
from tfseg.data.convert import write_tfrecords  # noqa: F401
from tfseg.data.decode import decode_image
from tfseg.data.registry import register_reader
from tfseg.data.source import Source
from tfseg.data.traced import plain
from tfseg.errors import InputError

_FEATURES = {
    "image": tf.io.FixedLenFeature([], tf.string),
    "label": tf.io.FixedLenFeature([], tf.string),
    "height": tf.io.FixedLenFeature([], tf.int64),
    "width": tf.io.FixedLenFeature([], tf.int64),
    "filename": tf.io.FixedLenFeature([], tf.string),
}


def read_metadata(data_dir, split):
    """The ``{split}.json`` written by ``write_tfrecords``; names the file when missing."""
    path = os.path.join(data_dir, split + ".json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"TFRecord metadata not found: {path}")
    with open(path) as f:
        return json.load(f)


@register_reader("tfrecord", records=True,
                 layout="SPLIT.json and SPLIT-*.tfrecord shards of --mode=convert",
                 docs="tfrecords")
def source(data_dir, split, missing_ok=False):
    """The split's classes and palette from its metadata, as a ``Source`` without pairs
    (the records are read by ``read_train_ids``); ``missing_ok`` is not needed here."""
    meta = read_metadata(data_dir, split)
    return Source(meta["source"], (), tuple(meta["class_names"]),
                  np.asarray(meta["palette"], np.uint8), None, None, "")


def decoded_size(data_dir, split):
    """(examples, bytes) of the split as ``read_train_ids`` yields it (uint8 image and
    label: 4 bytes a pixel), from the metadata."""
    meta = read_metadata(data_dir, split)
    if "pixels" not in meta:
        raise InputError(f"{os.path.join(data_dir, split + '.json')} has no pixel count "
                         f"(written by an older tfseg?); convert the data again to cache it "
                         f"in memory, or cache on disk (cache=\"path/prefix\")")
    return meta["num_examples"], meta["pixels"] * 4


def shard_files(data_dir, split):
    """Sorted shard paths of a split; raises naming the folder when there are none."""
    if not os.path.isdir(data_dir):
        raise FileNotFoundError(f"data folder not found: {data_dir}")
    shards = sorted(glob.glob(os.path.join(data_dir, f"{split}-*-of-*.tfrecord")))
    if not shards:
        raise InputError(f"no {split} TFRecord shards in {data_dir}")
    return shards


def parse_fn(raw, label_dtype=tf.int32):
    """A function: serialized record -> (image uint8 [H, W, 3], label [H, W], filename)."""

    def parse(record):
        x = tf.io.parse_single_example(record, _FEATURES)
        shape = tf.stack([x["height"], x["width"]])
        if raw:
            image = tf.reshape(tf.io.decode_raw(x["image"], tf.uint8), tf.concat([shape, [3]], 0))
            label = tf.reshape(tf.io.decode_raw(x["label"], tf.uint8), shape)
        else:
            image = decode_image(x["image"])
            label = tf.io.decode_png(x["label"], channels=1)[..., 0]
        return image, tf.cast(label, label_dtype), x["filename"]

    return parse


def _shard_examples(path, expected, parse, label_dtype, skip_bad_examples, stats):
    """(image, label) of one shard; a record that cannot be read or decoded is named.

    TF's "corrupted record at OFFSET" names no file, and a graph cannot catch
    it. Instead read errors (which end the shard: nothing after a bad record
    can be trusted) and decode errors are dropped by ``ignore_errors``, and an
    end marker compares the count with the number written: a shortfall raises
    naming the shard and the source file of the last good record or, with
    ``skip_bad_examples``, is logged and counted as bad examples.
    """
    examples = (tf.data.TFRecordDataset(path)
                .map(plain(lambda r: parse(r) + (False,)), num_parallel_calls=tf.data.AUTOTUNE,
                     deterministic=True)
                .ignore_errors())
    end = tf.data.Dataset.from_tensors((tf.zeros([0, 0, 3], tf.uint8),
                                        tf.zeros([0, 0], label_dtype), "", True))

    def check(state, element):
        count, last = state
        image, label, filename, is_end = element
        ok = ~is_end | tf.equal(count, expected)
        message = tf.cond(ok, lambda: tf.constant(""), lambda: tf.strings.join([
            "corrupt TFRecord shard ", path, ": ", tf.strings.as_string(expected - count),
            " of ", tf.strings.as_string(expected), " records unreadable after the one from ",
            tf.where(tf.equal(last, ""), "(none: the first)", last)]))
        if skip_bad_examples:
            def log():
                printed = tf.print("tfseg: skipping bad records:", message,
                                   output_stream=sys.stderr)
                updates = [stats.record_bad(expected - count)] if stats is not None else []
                with tf.control_dependencies([printed] + updates):
                    return tf.constant(False)
            deps = [tf.cond(ok, lambda: tf.constant(True), log)]
        else:
            deps = [tf.debugging.Assert(ok, ["tfseg:", message])]
        with tf.control_dependencies(deps):
            return (count + 1, filename), (tf.identity(image), label, is_end)

    start = (tf.constant(0, tf.int64), tf.constant(""))
    return (examples.concatenate(end).scan(start, plain(check))
            .filter(plain(lambda image, label, is_end: ~is_end))
            .map(plain(lambda image, label, is_end: (image, label))))


def read_tfrecords(data_dir, split, training=False, seed=None, deterministic=None,
                   skip_bad_examples=False, stats=None):
    """Examples ``(image uint8 [H, W, 3], label int32 [H, W])`` from converted shards.

    Evaluation reads shards in order (the source order); training shuffles
    the shard order each epoch and interleaves shards in parallel. A corrupt
    or truncated shard raises an InvalidArgumentError naming it or, with
    ``skip_bad_examples``, has its unreadable records logged and counted in
    ``stats.bad_examples`` (unknown label ids were counted at conversion:
    see the metadata's ``conversion_stats``).
    """
    return _read(data_dir, split, training, seed, deterministic, tf.int32, skip_bad_examples,
                 stats)


def read_train_ids(data_dir, split, training=False, seed=None, deterministic=None,
                   skip_bad_examples=False, stats=None):
    """``read_tfrecords`` with uint8 labels (the stored train ids), for cropping before the cast."""
    return _read(data_dir, split, training, seed, deterministic, tf.uint8, skip_bad_examples,
                 stats)


def _read(data_dir, split, training, seed, deterministic, label_dtype, skip_bad_examples,
          stats):
    shards = shard_files(data_dir, split)
    meta = read_metadata(data_dir, split)
    sizes = meta.get("shard_sizes", {})
    for shard in shards:
        if os.path.basename(shard) not in sizes:
            raise InputError(f"{shard} has no record count in {split}.json "
                             f"(written by an older tfseg?); convert the data again")
    parse = parse_fn(meta["raw"], label_dtype)
    files = tf.data.Dataset.from_tensor_slices(
        (shards, np.array([sizes[os.path.basename(s)] for s in shards], np.int64)))

    def read_shard(path, expected):
        return _shard_examples(path, expected, parse, label_dtype, skip_bad_examples, stats)

    if training:
        files = files.shuffle(len(shards), seed=seed, reshuffle_each_iteration=True)
        return files.interleave(plain(read_shard), cycle_length=min(len(shards), 8),
                                num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    return files.flat_map(plain(read_shard))
