import shutil

import numpy as np
import pytest
from PIL import Image

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


def test_palette_indices_outside_the_classes_become_255_and_are_counted(tmp_path):
    expected = voc_tree(tmp_path, sizes=((10, 14),))
    path = tmp_path / "SegmentationClass" / "2007_000000.png"
    label = expected[0].copy()
    label[1:3, :5] = 22  # not a VOC class, not the 255 border
    im = Image.fromarray(label, "P")
    im.putpalette(voc.color_map(256).reshape(-1).tolist())
    im.save(path)
    source = voc.source(str(tmp_path), "train")
    stats = DataStats()
    (_, got), = [(i, l.numpy()) for i, l in pairs_to_examples(
        pairs_dataset(source.pairs), source, stats=stats, deterministic=True)]
    want = np.where(label == 22, 255, label)
    np.testing.assert_array_equal(got, want)
    assert stats.as_dict()["unknown_label_pixels"] == 10
    assert stats.as_dict()["unknown_label_examples"] == 1


def test_missing_image_folder_is_named(tmp_path):
    voc_tree(tmp_path)
    shutil.rmtree(tmp_path / "JPEGImages")
    with pytest.raises(FileNotFoundError, match="JPEGImages"):
        voc.files(str(tmp_path), "train")


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
