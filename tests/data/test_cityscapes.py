import dataclasses
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from tfseg.data import (DataConfig, DataStats, build_dataset, build_dataset_with_stats,
                        cityscapes, pairs_dataset, pairs_to_examples)
from tfseg.errors import InputError
from tests.data.trees import cityscapes_tree, save

# cityscapesScripts labels.py: (id, trainId) for every label with id >= 0.
OFFICIAL = [(0, 255), (1, 255), (2, 255), (3, 255), (4, 255), (5, 255), (6, 255), (7, 0),
            (8, 1), (9, 255), (10, 255), (11, 2), (12, 3), (13, 4), (14, 255), (15, 255),
            (16, 255), (17, 5), (18, 255), (19, 6), (20, 7), (21, 8), (22, 9), (23, 10),
            (24, 11), (25, 12), (26, 13), (27, 14), (28, 15), (29, 255), (30, 255), (31, 16),
            (32, 17), (33, 18)]


def _decode_all(source, stats=None):
    ds = pairs_to_examples(pairs_dataset(source.pairs), source, stats=stats, deterministic=True)
    return [(i.numpy(), l.numpy()) for i, l in ds]


def test_metadata():
    assert cityscapes.NUM_CLASSES == len(cityscapes.CLASS_NAMES) == 19
    assert cityscapes.PALETTE.shape == (19, 3) and cityscapes.PALETTE.dtype == np.uint8
    assert tuple(cityscapes.PALETTE[0]) == (128, 64, 128)  # road
    assert dict(OFFICIAL) == cityscapes.KNOWN_LABEL_IDS


def test_files_pairs_images_with_labels(tmp_path):
    pairs = cityscapes_tree(tmp_path, n=2) + cityscapes_tree(tmp_path, n=1, city="avillage")
    assert cityscapes.files(str(tmp_path), "train") == tuple(sorted(pairs))


def test_label_ids_map_to_train_ids_and_unknown_ids_are_counted(tmp_path):
    ids = list(range(34)) + [40, 200, 255]
    pairs = cityscapes_tree(tmp_path, ids=ids, size=(10, 37), n=1)
    stats = DataStats()
    (_, label), = _decode_all(cityscapes.source(str(tmp_path), "train"), stats)
    table = {**dict(OFFICIAL), 40: 255, 200: 255, 255: 255}
    stored = np.asarray(Image.open(pairs[0][1]))
    np.testing.assert_array_equal(label, np.vectorize(table.get)(stored))
    assert label.dtype == np.int32
    # 40 and 200 are outside the defined ids (each occurs 10 times); 255 is "ignore".
    assert stats.as_dict() == dict(bad_examples=0, unknown_label_pixels=20,
                                   unknown_label_examples=1)


def test_train_ids_files_are_preferred(tmp_path):
    pairs = cityscapes_tree(tmp_path, ids=[7], n=1)
    train_ids = np.full((12, 16), 5, np.uint8)
    train_ids[0, 0] = 255
    path = save(pairs[0][1].replace("labelIds", "labelTrainIds"), train_ids)
    source = cityscapes.source(str(tmp_path), "train")
    assert source.pairs[0][1] == path
    np.testing.assert_array_equal(_decode_all(source)[0][1], train_ids)


def test_missing_folder_and_empty_split_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "leftImg8bit" / "val")):
        cityscapes.files(str(tmp_path), "val")
    (tmp_path / "leftImg8bit" / "test").mkdir(parents=True)
    (tmp_path / "gtFine" / "test").mkdir(parents=True)
    with pytest.raises(InputError, match=str(tmp_path / "leftImg8bit" / "test")):
        cityscapes.files(str(tmp_path), "test")


def test_missing_label_file_is_named(tmp_path):
    pairs = cityscapes_tree(tmp_path, n=1)
    tf.io.gfile.remove(pairs[0][1])
    with pytest.raises(FileNotFoundError, match="gtFine_labelIds.png"):
        cityscapes.files(str(tmp_path), "train")


@pytest.mark.parametrize("training", [False, True])
def test_missing_label_files_are_bad_examples_to_skip(tmp_path, training):
    """A label file that is gone, or a folder in its place: listing stops the run naming
    it, unless --skip_bad_examples, which counts and skips the pair like any other bad one."""
    pairs = cityscapes_tree(str(tmp_path), n=3, size=(16, 16))
    os.remove(pairs[0][1])
    os.remove(pairs[1][1])
    os.makedirs(pairs[1][1])
    config = DataConfig(dataset="cityscapes", root=str(tmp_path), crop_size=(8, 8),
                        batch_size=1, seed=0)
    with pytest.raises(FileNotFoundError, match=f"label file for {pairs[0][0]} not found"):
        build_dataset(config, training)
    config = dataclasses.replace(config, skip_bad_examples=True)
    dataset, stats = build_dataset_with_stats(config, training, epochs=1)
    assert len(list(dataset)) == 1
    assert stats.as_dict()["bad_examples"] == 2
