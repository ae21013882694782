"""Counters for data problems that the pipeline tolerates rather than raises."""

import tensorflow as tf


class DataStats:
    """Running counts, updated from inside the tf.data graph.

    ``build_dataset_with_stats`` makes one (or pass one to
    ``build_dataset(..., stats=...)``); read it with ``as_dict()`` or log
    ``summary()`` at any time (e.g. at each log step or after an evaluation).
    Counts accumulate over passes: each epoch counts its examples again (a bad
    file is logged and counted once per pass), and a training input counts the
    examples it has read ahead of the steps too; the summary says so.
    The counters are ``tf.Variable``s, so they see only work done in this
    process: not available together with the tf.data service, with ``cache``
    only the first pass is counted, and for TFRecord input unknown label ids
    were counted at conversion (``conversion_stats`` in the metadata).

    Attributes:
      bad_examples: pairs skipped because a file was unreadable, corrupt, of
        the wrong kind or of mismatched size, or TFRecords that could not be
        read (``skip_bad_examples`` only).
      unknown_label_pixels: label pixels whose stored id/colour is outside the
        data set's known set (they were mapped to 255).
      unknown_label_examples: examples with at least one such pixel.
    """

    def __init__(self):
        self.bad_examples = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.unknown_label_pixels = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.unknown_label_examples = tf.Variable(0, dtype=tf.int64, trainable=False)

    def record(self, ok, unknown_pixels):
        """Graph-side update for one example; returns the update ops."""
        unknown_pixels = tf.cast(unknown_pixels, tf.int64)
        return [
            self.bad_examples.assign_add(1 - tf.cast(ok, tf.int64), read_value=False),
            self.unknown_label_pixels.assign_add(unknown_pixels, read_value=False),
            self.unknown_label_examples.assign_add(
                tf.cast(unknown_pixels > 0, tf.int64), read_value=False),
        ]

    def record_bad(self, count):
        """Graph-side update: ``count`` more bad examples; returns the update op."""
        return self.bad_examples.assign_add(tf.cast(count, tf.int64), read_value=False)

    def as_dict(self):
        """Current counts as a plain ``{name: int}`` dict."""
        return {name: int(getattr(self, name).numpy()) for name in
                ("bad_examples", "unknown_label_pixels", "unknown_label_examples")}

    def summary(self, split):
        """The counts as one log line naming ``split``, or None when all are 0 (nothing
        was skipped or mapped: nothing to say)."""
        counts = self.as_dict()
        if not any(counts.values()):
            return None
        return (f"{split} data: {counts['bad_examples']:,} bad examples skipped, "
                f"{counts['unknown_label_pixels']:,} label pixels with unknown ids (mapped to "
                f"255, ignored) in {counts['unknown_label_examples']:,} examples, counted as "
                f"the input reads them: ahead of the steps, and again on each pass over the data")
