import numpy as np
import pytest

from tfseg.data import DataStats, pairs_dataset, pairs_to_examples, voc
from tfseg.errors import InputError
from tests.data.trees import voc_tree


def test_metadata_and_palette():
    assert voc.NUM_CLASSES == len(voc.CLASS_NAMES) == 21
    assert voc.PALETTE.shape == (21, 3)
    assert [tuple(c) for c in voc.PALETTE[:3]] == [(0, 0, 0), (128, 0, 0), (0, 128, 0)]
    assert tuple(voc.color_map()[255]) == (224, 224, 192)  # the border colour


def test_palette_labels_decode_to_class_indices(tmp_path):
    expected = voc_tree(tmp_path)
    source = voc.source(str(tmp_path), "train")
    stats = DataStats()
    ds = pairs_to_examples(pairs_dataset(source.pairs), source, stats=stats, deterministic=True)
    for (image, label), want in zip(ds, expected):
        assert image.shape == want.shape + (3,)
        np.testing.assert_array_equal(label.numpy(), want)
    assert stats.as_dict()["unknown_label_pixels"] == 0


def test_missing_list_and_empty_list_are_named(tmp_path):
    voc_tree(tmp_path)
    with pytest.raises(FileNotFoundError, match="val.txt"):
        voc.files(str(tmp_path), "val")
    (tmp_path / "ImageSets" / "Segmentation" / "val.txt").write_text("\n")
    with pytest.raises(InputError, match="val.txt"):
        voc.files(str(tmp_path), "val")
    (tmp_path / "ImageSets" / "Segmentation" / "val.txt").write_text("2007_999999\n")
    with pytest.raises(FileNotFoundError, match="2007_999999.jpg"):
        voc.files(str(tmp_path), "val")
