import numpy as np
import pytest
import tensorflow as tf

from tfseg.data import cityscapes, voc
from tfseg.data.source import IndexLabels

ALL_IDS = np.arange(256, dtype=np.uint8).reshape(16, 16)


@pytest.mark.parametrize("known, keep_below", [
    (cityscapes.KNOWN_LABEL_IDS, None),  # labelIds: a real table, gathered
    (cityscapes.label_mapping("x_gtFine_labelTrainIds.png"), 19),
    (voc.KNOWN_LABEL_IDS, 21),
])
def test_map_ids_matches_the_table_for_every_id(known, keep_below):
    labels = IndexLabels(known)
    assert labels.keep_below == keep_below
    want = np.array([known.get(i, 255) for i in range(256)]).reshape(16, 16)
    for ids in (ALL_IDS, ALL_IDS.astype(np.int32)):  # the compare path and the gather path
        got = labels.map_ids(tf.constant(ids))
        assert got.dtype == tf.int32
        np.testing.assert_array_equal(got, want)
    unknown = sum(1 for i in range(256) if i not in known and i != 255)
    assert int(labels.count_unknown(tf.constant(ALL_IDS))) == unknown
