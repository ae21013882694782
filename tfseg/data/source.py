"""The contract every dataset reader fulfils, plus shared listing helpers."""

import dataclasses
import os
from typing import Callable

import numpy as np
import tensorflow as tf

from tfseg.data.png import decode_index_png, is_index_png
from tfseg.errors import InputError

IGNORE_LABEL = 255
# What `png.is_index_png` accepts, in the words of the error that refuses a label file.
INDEX_PNG = "a single-channel (grayscale or palette) PNG of at most 8 bits"


@dataclasses.dataclass(frozen=True)
class Source:
    """One split of one data set on disk.

    Attributes:
      name: data set kind, e.g. "cityscapes".
      pairs: ((image_path, label_path), ...) in a stable, sorted order.
      class_names: one name per train id; ``len`` is the number of classes.
      palette: uint8 array [num_classes, 3], a display colour per train id.
      decode_label: maps a label file's bytes (scalar tf.string) to
        ``(label int32 [H, W] of train ids / 255, unknown int32 scalar)``,
        where ``unknown`` counts pixels whose stored value is outside the
        known set (they become 255). Pure TF ops only.
      label_format_ok: maps ``png.header(bytes)`` to a bool scalar tensor;
        False rejects the label file with an error naming it.
      label_format: human description of what ``label_format_ok`` accepts.
    """

    name: str
    pairs: tuple
    class_names: tuple
    palette: np.ndarray
    decode_label: Callable
    label_format_ok: Callable
    label_format: str

    @property
    def num_classes(self):
        return len(self.class_names)


def as_int32(label):
    """The identity label mapping: class ids stored as such, as int32."""
    return tf.cast(label, tf.int32)


def require_dir(path):
    """Raise FileNotFoundError naming ``path`` unless it is a directory."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"data folder not found: {path}")
    return path


def require_file(path, role="file"):
    """Raise FileNotFoundError naming ``path`` unless it is a file."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{role} not found: {path}")
    return path


def require_pair_file(path, role, skipping):
    """``require_file`` for a file of an (image, label) pair: a missing one passes when
    ``skipping`` (``skip_bad_examples``: the decode stage then counts and skips its pair),
    and the error says so otherwise."""
    if not skipping and not os.path.isfile(path):
        raise FileNotFoundError(f"{role} not found: {path} (--skip_bad_examples skips "
                                f"such pairs, naming and counting each)")
    return path


def require_pairs(pairs, where):
    """Raise ValueError naming ``where`` when a split has no examples."""
    if not pairs:
        raise InputError(f"no examples found in {where}")
    return tuple(pairs)


def lookup_table(known):
    """Build a 256-entry id -> train id table and its "unknown id" mask.

    Args:
      known: dict {stored id: train id or 255} of every id the format defines.

    Returns:
      (table, unknown): int32 [256] train ids (255 where not known) and int32
      [256] with 1 where the stored id is not in ``known`` (255 is always known:
      every format here uses it as "ignore").
    """
    table = np.full(256, IGNORE_LABEL, np.int32)
    unknown = np.ones(256, np.int32)
    for stored, train in {**known, IGNORE_LABEL: IGNORE_LABEL}.items():
        table[stored] = train
        unknown[stored] = 0
    return table, unknown


class IndexLabels:
    """A ``Source.decode_label`` for single-channel id PNGs mapped by a 256-entry table.

    Calling it fulfils the ``decode_label`` contract. The pipeline also uses
    its parts: ``decode_ids`` (stored ids, uint8) and ``map_ids`` (the table
    lookup). The lookup is per pixel, so it commutes with nearest-neighbour
    resampling, cropping, flipping and padding with 255 (255 maps to 255):
    training crops stored ids and maps only the crop.
    """

    def __init__(self, known):
        self.table, self.unknown = lookup_table(known)
        # Unknown stored ids as inclusive runs [(lo, hi), ...]: counting with a
        # few uint8 compares is ~5x cheaper than a histogram of int32 ids.
        flags = np.concatenate([[0], self.unknown, [0]])
        edges = np.flatnonzero(np.diff(flags))
        self.unknown_runs = tuple(zip(edges[0::2].tolist(), (edges[1::2] - 1).tolist()))
        # Tables that keep ids 0..n-1 and send all else to 255 (VOC's palette
        # indices, Cityscapes' trainIds files) are one compare on uint8 ids,
        # ~5x cheaper than a gather.
        ids = np.arange(256)
        self.keep_below = next((n for n in range(1, 256) if np.array_equal(
            self.table, np.where(ids < n, ids, IGNORE_LABEL))), None)

    @staticmethod
    def decode_ids(contents):
        """Label file bytes -> stored ids uint8 [H, W]."""
        return decode_index_png(contents)

    def map_ids(self, ids):
        """Stored ids (any integer dtype, any shape) -> int32 train ids / 255."""
        ids = tf.convert_to_tensor(ids)
        if self.keep_below is None:
            return tf.gather(tf.constant(self.table), tf.cast(ids, tf.int32))
        if ids.dtype == tf.uint8:  # whole images in evaluation: compare before widening
            return tf.cast(tf.where(ids < self.keep_below, ids, IGNORE_LABEL), tf.int32)
        ids = tf.cast(ids, tf.int32)
        return tf.where((ids >= 0) & (ids < self.keep_below), ids, IGNORE_LABEL)

    def count_unknown(self, ids):
        """int32 scalar: how many of ``ids`` (uint8) are outside the known set."""
        if len(self.unknown_runs) > 4:
            histogram = tf.math.bincount(tf.cast(ids, tf.int32), minlength=256, maxlength=256)
            return tf.reduce_sum(histogram * tf.constant(self.unknown))
        count = tf.constant(0, tf.int32)
        for lo, hi in self.unknown_runs:
            inside = (ids >= lo) & (ids <= hi) if lo < hi else tf.equal(ids, lo)
            count += tf.reduce_sum(tf.cast(inside, tf.int32))
        return count

    def __call__(self, contents):
        ids = self.decode_ids(contents)
        return self.map_ids(ids), self.count_unknown(ids)


def index_label_decoder(known):
    """A ``Source.decode_label`` for single-channel id PNGs mapped by ``known``."""
    return IndexLabels(known)


def index_png_source(name, pairs, class_names, palette, known, label_format=INDEX_PNG):
    """A ``Source`` whose label files are single-channel id PNGs of at most 8 bits
    (``png.is_index_png``), each stored id mapped by ``known``.

    Args:
      name, pairs, class_names, palette: as ``Source``'s.
      known: {stored id: train id or 255} of every id the format defines
        (``lookup_table``); any other stored id becomes 255, counted as unknown.
      label_format: what the format's label files are, for the error naming one that is
        not such a PNG.

    Example::

        index_png_source("voc", pairs, CLASS_NAMES, PALETTE, {i: i for i in range(21)})
    """
    return Source(name=name, pairs=pairs, class_names=class_names, palette=palette,
                  decode_label=index_label_decoder(known), label_format_ok=is_index_png,
                  label_format=label_format)
