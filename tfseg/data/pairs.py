"""(image, label) pairs as a tf.data pipeline: decoded in file order, a bad pair named
(strict mode), or logged, counted and dropped (``skip_bad_examples``); how each pair is
decoded and diagnosed: ``tfseg.data.decode``."""

import os
import sys

import tensorflow as tf

from tfseg.data.decode import decode_one, diagnose, guarded_decode, size_message
from tfseg.data.source import IndexLabels, as_int32
from tfseg.data.traced import plain


def _label_decoding(source):
    """(decode, fallback, finish, index): ``decode(bytes)`` -> (label, unknown or None).

    For an ``IndexLabels`` source the label is the stored ids (uint8) and
    ``finish`` the table lookup, which the training pipeline applies after
    nearest-neighbour cropping (exact, and 4-8x fewer pixels to map).
    """
    labels = source.decode_label
    if isinstance(labels, IndexLabels):
        return ((lambda c: (labels.decode_ids(c), None)), tf.zeros([0, 0], tf.uint8),
                labels.map_ids, labels)
    return labels, tf.zeros([0, 0], tf.int32), as_int32, None


class _PairLoader:
    """Decodes the pairs of `source`, counting bad examples and unknown label pixels
    into `stats` (None: no counting)."""

    def __init__(self, source, stats):
        self.source, self.stats = source, stats
        self.decode_label, self.fallback, self.finish, self.index = _label_decoding(source)

    def label_and_unknown(self, contents):
        """(label, its unknown pixels: counted only with stats) of the label file's bytes."""
        label, unknown = self.decode_label(contents)
        if unknown is None:
            unknown = self.index.count_unknown(label) if self.stats is not None else tf.constant(0)
        return label, unknown

    def record(self, ok, unknown):
        """The ops that count one pair into the stats (none without stats)."""
        return self.stats.record(ok, unknown) if self.stats is not None else []

    def skipping(self, pairs_ds, num_parallel_calls, deterministic):
        """(image, label, image_path) of every pair that decodes, a bad one logged and dropped."""
        def load(image_path, label_path):
            image, (label, unknown), ok, message = guarded_decode(
                image_path, label_path, self.source, self.label_and_unknown,
                (self.fallback, tf.constant(0)))
            def log():
                with tf.control_dependencies([tf.print("tfseg: skipping bad example:", message,
                                                       output_stream=sys.stderr)]):
                    return tf.constant(False)
            deps = self.record(ok, unknown) + [tf.cond(ok, lambda: tf.constant(True), log)]
            with tf.control_dependencies(deps):
                return tf.identity(image), tf.identity(label), tf.identity(ok), image_path

        examples = pairs_ds.map(plain(load), num_parallel_calls=num_parallel_calls,
                                deterministic=deterministic)
        return examples.filter(plain(_is_ok)).map(plain(_drop_ok))

    def strict(self, pairs_ds, num_parallel_calls):
        """(image, label, image_path) of every pair in file order; a pair that fails to
        decode, or whose image and label sizes differ, raises an error naming it."""
        def number(state, pair):
            position, previous = state
            return (position + 1, pair), (position, pair, previous)

        def load(position, pair, previous):
            def real():
                image, (label, unknown) = decode_one(pair[0], pair[1], self.source,
                                                  self.label_and_unknown)
                with tf.control_dependencies(self.record(True, unknown)):
                    return tf.identity(image), tf.identity(label)
            end = tf.equal(pair[0], "") & tf.equal(pair[1], "")
            image, label = tf.cond(end, lambda: (tf.zeros([0, 0, 3], tf.uint8), self.fallback),
                                   real)
            return position, image, label, pair, previous, end

        def check(expected, element):
            position, image, label, pair, previous, end = element
            dropped = tf.not_equal(position, expected)
            ok = ~dropped & tf.reduce_all(tf.equal(tf.shape(image)[:2], tf.shape(label)[:2]))
            # One rarely taken branch: only a bad pair pays for building the message. The
            # diagnosis reads the dropped pair's files again, so it runs only for a dropped
            # pair: a pair of the wrong sizes at the start has no previous pair to read.
            message = tf.cond(ok, lambda: tf.constant(""), lambda: tf.cond(
                dropped, lambda: diagnose(previous[0], previous[1], self.source),
                lambda: size_message(pair[0], pair[1], image, label)))
            with tf.control_dependencies([tf.debugging.Assert(ok, ["tfseg:", message])]):
                return position + 1, (tf.identity(image), label, pair[0], end)

        empty = (tf.constant(""), tf.constant(""))
        marked = pairs_ds.map(plain(_pair)).concatenate(tf.data.Dataset.from_tensors(empty))
        examples = (marked.scan((tf.constant(0, tf.int64), empty), plain(number))
                    .map(plain(load), num_parallel_calls=num_parallel_calls, deterministic=True)
                    .ignore_errors()
                    .scan(tf.constant(0, tf.int64), plain(check)))
        return examples.filter(plain(_not_end)).map(plain(_drop_end))


def decode_pairs(pairs_ds, source, skip_bad_examples=False, stats=None,
                 num_parallel_calls=tf.data.AUTOTUNE, deterministic=None):
    """(dataset of (image uint8 [H, W, 3], label, image_path), finish).

    See ``pairs_to_examples``; ``finish(label)`` gives the int32 train ids
    (see ``_label_decoding``). Strict mode keeps the decode in file order
    (that is how a dropped pair is found); the element order of everything
    after it is the caller's.
    """
    loader = _PairLoader(source, stats)
    if skip_bad_examples:
        return loader.skipping(pairs_ds, num_parallel_calls, deterministic), loader.finish
    return loader.strict(pairs_ds, num_parallel_calls), loader.finish


def _pair(image_path, label_path):
    return image_path, label_path


def _is_ok(image, label, ok, path):
    return ok


def _drop_ok(image, label, ok, path):
    return image, label, path


def _not_end(image, label, path, end):
    return ~end


def _drop_end(image, label, path, end):
    return image, label, path


def pairs_to_examples(pairs_ds, source, skip_bad_examples=False, stats=None,
                      num_parallel_calls=tf.data.AUTOTUNE, deterministic=None, keep_path=False):
    """Map a dataset of (image_path, label_path) to (image uint8 HxWx3, label int32 HxW).

    With ``keep_path`` the elements are (image, label, image_path).

    Strict mode (default) fails on the first bad pair with an
    InvalidArgumentError whose message names the file(s). With
    ``skip_bad_examples`` bad pairs are logged to stderr (naming the files),
    counted in ``stats.bad_examples`` when given, and dropped.
    """
    examples, finish = decode_pairs(pairs_ds, source, skip_bad_examples, stats,
                                    num_parallel_calls, deterministic)
    if keep_path:
        return examples.map(plain(lambda image, label, path: (image, finish(label), path)))
    return examples.map(plain(lambda image, label, path: (image, finish(label))))


def pairs_dataset(pairs):
    """A dataset of ``(image_path, label_path)`` string scalars from a list of pairs.

    Paths go in as the file system's bytes: a name that is not UTF-8 (``os.listdir``'s
    str with a surrogate) would not convert to a tf.string.
    """
    images, labels = zip(*pairs)
    return tf.data.Dataset.from_tensor_slices(([os.fsencode(p) for p in images],
                                               [os.fsencode(p) for p in labels]))
