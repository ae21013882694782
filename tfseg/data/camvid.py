"""CamVid-style reader: images plus colour-coded label PNGs and ``class_dict.csv``.

Layout (as in the common Kaggle CamVid release)::

    root/class_dict.csv            name,r,g,b
    root/{split}/NAME.png          image (.png or .jpg)
    root/{split}_labels/NAME_L.png colour label (NAME.png also accepted)

Rows named void/unlabelled/unlabeled/ignore mean "ignore" (255) rather than
a class. A pixel gets a class only when all three channels match its colour;
any other colour becomes 255 and is counted as unknown.
"""

import csv
import glob
import os

import numpy as np
import tensorflow as tf

from tfseg.data import png
from tfseg.data.registry import register_reader
from tfseg.data.source import (IGNORE_LABEL, Source, require_dir, require_file,
                               require_pair_file, require_pairs)
from tfseg.errors import InputError

IGNORE_NAMES = ("void", "unlabelled", "unlabeled", "ignore")


def read_class_dict(path):
    """Parse ``class_dict.csv`` -> (names tuple, colours uint8 [N, 3], ignore colours [M, 3]).

    Stray spaces around names and numbers are stripped, and so is a UTF-8 byte
    order mark (spreadsheet tools on Windows write one). Raises ValueError
    naming the file for a malformed row or a colour used twice.
    """
    names, colours, ignored = [], [], []
    with open(require_file(path, "class_dict.csv"), encoding="utf-8-sig", newline="") as f:
        rows = [[c.strip() for c in row] for row in csv.reader(f) if any(c.strip() for c in row)]
    if rows and rows[0][0].lower() == "name":
        rows = rows[1:]
    for row in rows:
        try:
            name, rgb = row[0], tuple(int(v) for v in row[1:4])
            if len(rgb) != 3 or not all(0 <= v <= 255 for v in rgb):
                raise ValueError
        except (ValueError, IndexError):
            raise InputError(f"bad row {row!r} in {path}") from None
        (ignored if name.lower() in IGNORE_NAMES else colours).append(rgb)
        if name.lower() not in IGNORE_NAMES:
            names.append(name)
    every = colours + ignored
    if len(set(every)) != len(every):
        raise InputError(f"a colour is listed twice in {path}")
    if not names:
        raise InputError(f"no classes in {path}")
    return (tuple(names), np.array(colours, np.uint8).reshape(-1, 3),
            np.array(ignored, np.uint8).reshape(-1, 3))


def files(root, split, missing_ok=False):
    """List ``(image_path, label_path)`` pairs of ``root/{split}``, sorted.

    Raises:
      FileNotFoundError: a folder or an image's label file is missing (named); a
        missing label file is listed anyway when ``missing_ok``.
      ValueError: the image folder is empty (named).
    """
    image_dir = require_dir(os.path.join(root, split))
    label_dir = require_dir(os.path.join(root, split + "_labels"))
    images = sorted(p for ext in ("png", "jpg", "jpeg")
                    for p in glob.glob(os.path.join(image_dir, "*." + ext)))
    require_pairs(images, image_dir)
    pairs = []
    for image in images:
        stem = os.path.splitext(os.path.basename(image))[0]
        label = os.path.join(label_dir, stem + "_L.png")
        if not os.path.isfile(label):
            label = require_pair_file(os.path.join(label_dir, stem + ".png"),
                                 "label file for " + image, missing_ok)
        pairs.append((image, label))
    return tuple(pairs)


def colour_label_decoder(colours, ignored):
    """A ``Source.decode_label`` mapping exact RGB matches to class indices.

    Colours become 24-bit keys looked up with ``searchsorted`` in a sorted key
    table: pure TF and no hash-table resource for the data service to carry.
    """
    # 24-bit keys fit int32, half the per-pixel bytes of int64 at full resolution.
    keys = np.concatenate([colours, ignored]).astype(np.int32) @ np.array([65536, 256, 1], np.int32)
    values = np.concatenate([np.arange(len(colours)), np.full(len(ignored), IGNORE_LABEL)])
    order = np.argsort(keys)
    sorted_keys = tf.constant(keys[order])
    sorted_values = tf.constant(values[order].astype(np.int32))

    def decode_label(contents):
        rgb = tf.cast(tf.io.decode_png(contents, channels=3), tf.int32)
        key = rgb[..., 0] * 65536 + rgb[..., 1] * 256 + rgb[..., 2]
        flat = tf.reshape(key, [-1])
        index = tf.minimum(tf.searchsorted(sorted_keys, flat), len(keys) - 1)
        match = tf.equal(tf.gather(sorted_keys, index), flat)
        label = tf.where(match, tf.gather(sorted_values, index), IGNORE_LABEL)
        unknown = tf.reduce_sum(tf.cast(tf.logical_not(match), tf.int32))
        return tf.reshape(label, tf.shape(key)), unknown

    return decode_label


def classes(root, split=None):
    """(class names, palette) of ``root/class_dict.csv``, without the images."""
    return read_class_dict(os.path.join(root, "class_dict.csv"))[:2]


@register_reader("camvid", classes=classes,
                 layout="class_dict.csv, SPLIT/*.png and SPLIT_labels/*_L.png",
                 docs="camvid", marks=("class_dict.csv",))
def source(root, split, missing_ok=False):
    """The split as a ``Source``; classes and palette come from ``class_dict.csv``;
    ``missing_ok`` as ``files``."""
    names, colours, ignored = read_class_dict(os.path.join(root, "class_dict.csv"))
    return Source(
        name="camvid",
        pairs=files(root, split, missing_ok),
        class_names=names,
        palette=colours,
        decode_label=colour_label_decoder(colours, ignored),
        label_format_ok=png.is_colour_png,
        label_format="an 8-bit RGB, RGBA or palette PNG",
    )
