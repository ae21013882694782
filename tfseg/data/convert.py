"""Sharded TFRecord conversion of any ``Source`` (``--mode=convert``); the shards are read
by ``tfseg.data.tfrecords``.

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

Example:
    write_tfrecords(cityscapes.source("data/cityscapes", "val"), "data/tfrecords", "val")
"""

import glob
import json
import os

import numpy as np
import tensorflow as tf

from tfseg.data.pairs import pairs_dataset, pairs_to_examples
from tfseg.data.feed import iterate
from tfseg.io.outputs import require_folder, staged
from tfseg.data.stats import DataStats
from tfseg.data.traced import plain


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
    # corrupt record from one that simply ended (``tfrecords._shard_examples``); the
    # pixel count sizes an in-memory cache without reading the shards.
    with open(os.path.join(out_dir, split + ".json"), "w") as f:
        json.dump(dict(raw=raw, num_examples=sum(sizes.values()), shard_sizes=sizes,
                       pixels=pixels,
                       source=source.name, class_names=list(source.class_names),
                       palette=np.asarray(source.palette).tolist(),
                       conversion_stats=stats.as_dict()), f)
    return [os.path.basename(path) for path in shard_paths]
