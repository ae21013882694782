"""Sharded TFRecord conversion of any ``Source`` and the matching reader.

Records hold labels already mapped to train ids, so the reader needs no
per-format logic. Two storage modes:
  encoded (default): the original image file bytes and a PNG of the label;
    small, and decode is still parallel on the reading side.
  raw: decoded uint8 pixels; ~10x larger on disk but no decode at all, for
    when decode is the bottleneck and storage is cheap.
A ``{split}.json`` next to the shards records the mode, record and pixel
counts and class metadata. A split's shards and its JSON are written whole, renamed into
place together (the JSON last), replacing the split's previous shards
(``tfseg.io.outputs``).
"""

import glob
import json
import os
import sys

import numpy as np
import tensorflow as tf

from tfseg.data.decode import decode_image
from tfseg.data.pairs import pairs_dataset, pairs_to_examples
from tfseg.data.feed import iterate
from tfseg.io.outputs import require_folder, staged
from tfseg.data.registry import register_reader
from tfseg.data.source import Source
from tfseg.data.stats import DataStats
from tfseg.data.traced import plain
from tfseg.errors import InputError

_FEATURES = {
    "image": tf.io.FixedLenFeature([], tf.string),
    "label": tf.io.FixedLenFeature([], tf.string),
    "height": tf.io.FixedLenFeature([], tf.int64),
    "width": tf.io.FixedLenFeature([], tf.int64),
    "filename": tf.io.FixedLenFeature([], tf.string),
}


def _bytes(value):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int(value):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def write_tfrecords(source, out_dir, split, num_shards=4, raw=False, skip_bad_examples=False):
    """Convert ``source`` into ``out_dir/{split}-SSSSS-of-NNNNN.tfrecord`` shards.

    Shards take contiguous runs of ``source.pairs`` so that reading them in
    order reproduces the source order (skipped pairs shorten the last shards).
    Bad files raise (naming the file) or, with ``skip_bad_examples``, are
    logged and left out. Labels are mapped to train ids here, so the counts
    of a ``DataStats`` (skipped pairs, unknown label ids) are taken here too
    and saved in the metadata as ``conversion_stats``.

    Args:
      source: a ``Source`` (e.g. ``cityscapes.source(root, "train")``).
      out_dir: output folder (created); its other splits and files are left alone.
      split: name used for the shard files and metadata.
      num_shards: number of files (capped at the number of examples).
      raw: store decoded pixels instead of encoded bytes.

    Returns:
      The list of shard paths written.
    """
    require_folder(out_dir, "--tfrecord_dir")
    with staged(out_dir, last=(split + ".json",)) as stage:
        # The split's shards of an earlier conversion (another --tfrecord_shards) go too.
        stage.remove(*(os.path.basename(p) for p in
                       glob.glob(os.path.join(out_dir, f"{split}-*-of-*.tfrecord"))))
        names = _write(source, stage.dir, split, num_shards, raw, skip_bad_examples)
    return [os.path.join(out_dir, name) for name in names]


def _write(source, out_dir, split, num_shards, raw, skip_bad_examples):
    """``write_tfrecords`` into ``out_dir`` (a staging folder); the shards' names."""
    stats = DataStats()
    examples = pairs_to_examples(pairs_dataset(source.pairs), source, skip_bad_examples, stats,
                                 deterministic=True, keep_path=True)

    def encode(image, label, path):
        label = tf.cast(label, tf.uint8)
        if raw:
            return path, image, label, tf.shape(label)
        # Original image bytes as they are (no re-encoding loss); label as a PNG.
        return (path, tf.io.read_file(path), tf.io.encode_png(label[..., tf.newaxis]),
                tf.shape(label))

    examples = examples.map(plain(encode), num_parallel_calls=tf.data.AUTOTUNE)
    num_shards = max(1, min(num_shards, len(source.pairs)))
    bounds = np.linspace(0, len(source.pairs), num_shards + 1).astype(int)
    shard_paths = [os.path.join(out_dir, f"{split}-{i:05d}-of-{num_shards:05d}.tfrecord")
                   for i in range(num_shards)]
    # A bad file is one line naming it (an InputError), not TensorFlow's op error.
    iterator = iterate(examples.prefetch(tf.data.AUTOTUNE), skip_bad_examples)
    sizes = {}
    pixels = 0
    for shard, path in enumerate(shard_paths):
        sizes[os.path.basename(path)] = 0
        with tf.io.TFRecordWriter(path) as writer:
            for _ in range(bounds[shard + 1] - bounds[shard]):
                item = next(iterator, None)
                if item is None:
                    break
                filename, image, label, (height, width) = (t.numpy() for t in item)
                writer.write(tf.train.Example(features=tf.train.Features(feature={
                    "image": _bytes(image.tobytes() if raw else image),
                    "label": _bytes(label.tobytes() if raw else label),
                    "height": _int(int(height)),
                    "width": _int(int(width)),
                    "filename": _bytes(filename),
                })).SerializeToString())
                sizes[os.path.basename(path)] += 1
                pixels += int(height) * int(width)
    # Record counts per shard let the reader tell a shard cut short by a
    # corrupt record from one that simply ended (see ``_shard_examples``); the
    # pixel count sizes an in-memory cache without reading the shards.
    with open(os.path.join(out_dir, split + ".json"), "w") as f:
        json.dump(dict(raw=raw, num_examples=sum(sizes.values()), shard_sizes=sizes,
                       pixels=pixels,
                       source=source.name, class_names=list(source.class_names),
                       palette=np.asarray(source.palette).tolist(),
                       conversion_stats=stats.as_dict()), f)
    return [os.path.basename(path) for path in shard_paths]


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
