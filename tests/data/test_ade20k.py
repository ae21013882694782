import os

import numpy as np
import pytest

from tfseg.data import (DataConfig, DataStats, ade20k, build_dataset, build_dataset_with_stats,
                        class_names, pairs_dataset, pairs_to_examples, palette)
from tfseg.errors import InputError
from tests.data.trees import ade20k_tree


def _expected(annotation):
    """The benchmark's reading: value - 1 for 1-150, everything else ignored."""
    return np.where((annotation >= 1) & (annotation <= 150), annotation.astype(np.int32) - 1, 255)


def _unknown(annotation):
    return int(((annotation > 150) & (annotation < 255)).sum())


def test_class_names_and_palette():
    assert len(ade20k.CLASS_NAMES) == len(set(ade20k.CLASS_NAMES)) == 150
    assert ade20k.CLASS_NAMES[:5] == ("wall", "building", "sky", "floor", "tree")
    assert ade20k.CLASS_NAMES[-3:] == ("glass", "clock", "flag")
    assert ade20k.PALETTE.shape == (150, 3) and ade20k.PALETTE.dtype == np.uint8
    colours = {tuple(c) for c in ade20k.PALETTE}
    assert len(colours) == 150 and (0, 0, 0) not in colours


def test_pairs_are_found_sorted_and_split_names_map_to_folders(tmp_path):
    ade20k_tree(tmp_path, sizes=((5, 7), (6, 8), (7, 9)), folder="validation")
    (tmp_path / "images" / "validation" / "notes.txt").write_text("not an image")
    pairs = ade20k.files(str(tmp_path), "val")
    assert ade20k.files(str(tmp_path), "validation") == pairs
    images = [os.path.basename(i) for i, _ in pairs]
    assert images == sorted(images) and len(images) == 3
    for image, annotation in pairs:
        assert os.path.dirname(image).endswith(os.path.join("images", "validation"))
        assert os.path.splitext(os.path.basename(image))[0] == \
            os.path.splitext(os.path.basename(annotation))[0]
        assert os.path.dirname(annotation).endswith(os.path.join("annotations", "validation"))


def test_labels_shift_down_zero_is_ignored_and_unknown_values_are_counted(tmp_path):
    annotations = ade20k_tree(tmp_path)
    source = ade20k.source(str(tmp_path), "train")
    assert source.num_classes == 150
    stats = DataStats()
    decoded = [(i.numpy(), l.numpy()) for i, l in pairs_to_examples(
        pairs_dataset(source.pairs), source, stats=stats, deterministic=True)]
    assert len(decoded) == 2
    for (image, label), annotation in zip(decoded, annotations):
        assert image.shape == annotation.shape + (3,)
        np.testing.assert_array_equal(label, _expected(annotation))
    # Every value occurs: 1 -> 0 and 150 -> 149 (ends of the shift), 0 and 255 -> 255.
    first = annotations[0]
    assert set(decoded[0][1][first == 1]) == {0} and set(decoded[0][1][first == 150]) == {149}
    assert set(decoded[0][1][(first == 0) | (first == 255)]) == {255}
    counts = stats.as_dict()
    assert counts["unknown_label_pixels"] == sum(_unknown(a) for a in annotations) > 0
    assert counts["unknown_label_examples"] == 2


def test_missing_annotation_is_named_or_skipped(tmp_path):
    ade20k_tree(tmp_path, sizes=((5, 7), (6, 8), (7, 9)))
    gone = tmp_path / "annotations" / "training" / "ADE_train_00000002.png"
    os.remove(gone)
    with pytest.raises(FileNotFoundError, match=f"annotation for .* not found: {gone}"):
        ade20k.files(str(tmp_path), "train")
    config = DataConfig(dataset="ade20k", root=str(tmp_path), split="train", batch_size=1,
                        skip_bad_examples=True)
    dataset, stats = build_dataset_with_stats(config, training=False)
    assert len(list(dataset)) == 2 and stats.as_dict()["bad_examples"] == 1


def test_missing_and_empty_split_folders_are_named(tmp_path):
    ade20k_tree(tmp_path)
    with pytest.raises(FileNotFoundError, match=os.path.join("images", "validation")):
        ade20k.files(str(tmp_path), "val")
    os.makedirs(tmp_path / "images" / "validation")
    os.makedirs(tmp_path / "annotations" / "validation")
    with pytest.raises(InputError, match=os.path.join("images", "validation")):
        ade20k.files(str(tmp_path), "val")


def test_an_object_info_file_overrides_the_class_names(tmp_path):
    ade20k_tree(tmp_path, sizes=((5, 7),))
    config = DataConfig(dataset="ade20k", root=str(tmp_path))
    assert class_names(config) == ade20k.CLASS_NAMES
    # As the release's objectInfo150.txt writes it: tab-separated, synonyms after a comma.
    rows = [f"{k + 1}\t0.01\t10\t1\t{name}, synonym" for k, name in
            enumerate(n.upper() for n in ade20k.CLASS_NAMES)]
    header = "Idx\tRatio\tTrain\tVal\tName\n"
    (tmp_path / "objectInfo150.txt").write_text(header + "\n".join(rows) + "\n")
    want = tuple(n.upper() for n in ade20k.CLASS_NAMES)
    assert class_names(config) == want
    assert ade20k.source(str(tmp_path), "train").class_names == want
    np.testing.assert_array_equal(palette(config), ade20k.PALETTE)
    # The .csv form wins over the .txt; its ';'-joined names are kept whole.
    (tmp_path / "objectInfo150.csv").write_text(
        "Idx,Ratio,Train,Val,Stuff,Name\n" + "".join(
            f"{k + 1},0.01,10,1,0,name{k};x\n" for k in range(150)))
    assert class_names(config)[:2] == ("name0;x", "name1;x")


def test_a_bad_object_info_file_is_named(tmp_path):
    path = tmp_path / "objectInfo150.csv"
    path.write_text("Idx,Ratio,Train,Val,Name\n1,0.1,1,1,wall\n2,0.1,1,1,sky\n")
    with pytest.raises(InputError, match=f"{path} must name 150 classes.*has 2 rows"):
        ade20k.class_names(str(tmp_path))
    path.write_text("Idx,Ratio\n1,0.1\n")
    with pytest.raises(InputError, match=f"no Name column in {path}"):
        ade20k.class_names(str(tmp_path))


def test_batches_through_the_real_pipeline(tmp_path):
    annotations = ade20k_tree(tmp_path, sizes=((97, 129), (97, 129), (33, 45)))
    config = DataConfig(dataset="ade20k", root=str(tmp_path), split="train", batch_size=2,
                        crop_size=(31, 41), seed=1, deterministic=True)
    (image, label), = [(i.numpy(), l.numpy()) for i, l in
                       build_dataset(config, training=True, epochs=1)]
    assert image.shape == (2, 31, 41, 3) and label.shape == (2, 31, 41)
    # Crops (and their padding) of mapped ids: never a stored value above 149.
    assert set(np.unique(label)) <= set(range(150)) | {255} and label.max() == 255
    assert len(set(np.unique(label))) > 20
    batches = [(i.numpy(), l.numpy()) for i, l in build_dataset(config, training=False)]
    assert [i.shape for i, _ in batches] == [(2, 97, 129, 3), (1, 33, 45, 3)]
    np.testing.assert_array_equal(batches[0][1][1], _expected(annotations[1]))
    np.testing.assert_array_equal(batches[1][1][0], _expected(annotations[2]))
