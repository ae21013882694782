"""tfseg.data.stats: the counters' one-line summary."""

import tensorflow as tf

from tfseg.data.stats import DataStats


def test_the_summary_says_that_it_counts_reads_not_distinct_files():
    """A bad file read on two passes counts twice, and the training input counts what it
    has read ahead of the steps: the line must not read as a count of distinct files."""
    stats = DataStats()
    assert stats.summary("train") is None
    for _ in range(2):  # one bad file, one file with unknown ids; two passes
        stats.record(tf.constant(False), tf.constant(0))
        stats.record(tf.constant(True), tf.constant(1500))
    assert stats.summary("train") == (
        "train data: 2 bad examples skipped, 3,000 label pixels with unknown ids (mapped to "
        "255, ignored) in 2 examples, counted as the input reads them: ahead of the steps, "
        "and again on each pass over the data")
