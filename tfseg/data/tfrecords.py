"""Sharded TFRecord conversion of any ``Source`` and the matching reader.

Records hold labels already mapped to train ids, so the reader needs no
per-format logic. Two storage modes:
  encoded (default): the original image file bytes and a PNG of the label;
    small, and decode is still parallel on the reading side.
  raw: decoded uint8 pixels; ~10x larger on disk but no decode at all, for
    when decode is the bottleneck and storage is cheap.
A ``{split}.json`` next to the shards records the mode and class metadata.
"""

import glob
import json
import os

import numpy as np
import tensorflow as tf

from tfseg.data.decode import decode_image, pairs_dataset, pairs_to_examples

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
    logged and left out.

    Args:
      source: a ``Source`` (e.g. ``cityscapes.source(root, "train")``).
      out_dir: output folder (created).
      split: name used for the shard files and metadata.
      num_shards: number of files (capped at the number of examples).
      raw: store decoded pixels instead of encoded bytes.

    Returns:
      The list of shard paths written.
    """
    os.makedirs(out_dir, exist_ok=True)
    examples = pairs_to_examples(pairs_dataset(source.pairs), source, skip_bad_examples,
                                 deterministic=True, keep_path=True)

    def encode(image, label, path):
        label = tf.cast(label, tf.uint8)
        if raw:
            return path, image, label, tf.shape(label)
        # Original image bytes as they are (no re-encoding loss); label as a PNG.
        return (path, tf.io.read_file(path), tf.io.encode_png(label[..., tf.newaxis]),
                tf.shape(label))

    examples = examples.map(encode, num_parallel_calls=tf.data.AUTOTUNE)
    num_shards = max(1, min(num_shards, len(source.pairs)))
    bounds = np.linspace(0, len(source.pairs), num_shards + 1).astype(int)
    shard_paths = [os.path.join(out_dir, f"{split}-{i:05d}-of-{num_shards:05d}.tfrecord")
                   for i in range(num_shards)]
    iterator = iter(examples.prefetch(tf.data.AUTOTUNE))
    count = 0
    for shard, path in enumerate(shard_paths):
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
                count += 1
    with open(os.path.join(out_dir, split + ".json"), "w") as f:
        json.dump(dict(raw=raw, num_examples=count, source=source.name,
                       class_names=list(source.class_names),
                       palette=np.asarray(source.palette).tolist()), f)
    return shard_paths


def read_metadata(data_dir, split):
    """The ``{split}.json`` written by ``write_tfrecords``; names the file when missing."""
    path = os.path.join(data_dir, split + ".json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"tfseg: TFRecord metadata not found: {path}")
    with open(path) as f:
        return json.load(f)


def shard_files(data_dir, split):
    """Sorted shard paths of a split; raises naming the folder when there are none."""
    if not os.path.isdir(data_dir):
        raise FileNotFoundError(f"tfseg: data folder not found: {data_dir}")
    shards = sorted(glob.glob(os.path.join(data_dir, f"{split}-*-of-*.tfrecord")))
    if not shards:
        raise ValueError(f"tfseg: no {split} TFRecord shards in {data_dir}")
    return shards


def parse_fn(raw, label_dtype=tf.int32):
    """A function: serialized record -> (image uint8 [H, W, 3], label [H, W] of ``label_dtype``)."""

    def parse(record):
        x = tf.io.parse_single_example(record, _FEATURES)
        shape = tf.stack([x["height"], x["width"]])
        if raw:
            image = tf.reshape(tf.io.decode_raw(x["image"], tf.uint8), tf.concat([shape, [3]], 0))
            label = tf.reshape(tf.io.decode_raw(x["label"], tf.uint8), shape)
        else:
            image = decode_image(x["image"])
            label = tf.io.decode_png(x["label"], channels=1)[..., 0]
        return image, tf.cast(label, label_dtype)

    return parse


def read_tfrecords(data_dir, split, training=False, seed=None, deterministic=None):
    """Examples ``(image uint8 [H, W, 3], label int32 [H, W])`` from converted shards.

    Evaluation reads shards in order (the source order); training shuffles
    the shard order each epoch and interleaves shards in parallel.
    """
    return _read(data_dir, split, training, seed, deterministic, tf.int32)


def _read(data_dir, split, training, seed, deterministic, label_dtype):
    shards = shard_files(data_dir, split)
    parse = parse_fn(read_metadata(data_dir, split)["raw"], label_dtype)
    if training:
        files = tf.data.Dataset.from_tensor_slices(shards).shuffle(
            len(shards), seed=seed, reshuffle_each_iteration=True)
        records = files.interleave(tf.data.TFRecordDataset, cycle_length=min(len(shards), 8),
                                   num_parallel_calls=tf.data.AUTOTUNE,
                                   deterministic=deterministic)
    else:
        records = tf.data.TFRecordDataset(shards)
    return records.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)


def read_train_ids(data_dir, split, training=False, seed=None, deterministic=None):
    """``read_tfrecords`` with uint8 labels (the stored train ids), for cropping before the cast."""
    return _read(data_dir, split, training, seed, deterministic, tf.uint8)
