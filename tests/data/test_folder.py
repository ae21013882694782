import os

import numpy as np
import pytest

from tfseg.data import (DataConfig, DataStats, build_dataset, build_dataset_with_stats,
                        class_names, folder, pairs_dataset, pairs_to_examples, palette, voc)
from tfseg.errors import InputError
from tests.data.trees import palette_mask, save

CLASSES = "background 0 0 0\ntraffic light 250 170 30\n\nroad 128 64 128\n"


def _mask(size, seed, values=(0, 1, 2, 255)):
    return np.random.default_rng(seed).choice(np.array(values, np.uint8), size)


def _image(path, size, seed=0):
    return save(path, np.random.default_rng(seed).integers(0, 256, size + (3,), dtype=np.uint8))


def _tree(root, split="train", stems=("b", "a", "c"), exts=(".jpg", ".png", ".JPEG"),
          size=(13, 17)):
    """Images of mixed extensions with grayscale masks; returns {stem: mask}."""
    (root / "classes.txt").write_text(CLASSES)
    masks = {}
    for k, (stem, ext) in enumerate(zip(stems, exts)):
        _image(root / split / "images" / (stem + ext), size, k)
        masks[stem] = _mask(size, k)
        save(root / split / "masks" / (stem + ".png"), masks[stem])
    return masks


def _decoded(source, stats=None):
    return [(i.numpy(), l.numpy()) for i, l in pairs_to_examples(
        pairs_dataset(source.pairs), source, stats=stats, deterministic=True)]


def test_class_list_with_names_of_several_words_and_colours(tmp_path):
    (tmp_path / "classes.txt").write_text(CLASSES)
    names, colours = folder.read_classes(str(tmp_path / "classes.txt"))
    assert names == ("background", "traffic light", "road")
    assert colours.tolist() == [[0, 0, 0], [250, 170, 30], [128, 64, 128]]
    config = DataConfig(dataset="folder", root=str(tmp_path))
    assert class_names(config) == names
    np.testing.assert_array_equal(palette(config), colours)


def test_class_list_without_colours_gets_a_fixed_palette(tmp_path):
    (tmp_path / "classes.txt").write_text("sky\nchest of drawers\ncar\nbig red fire truck\n")
    names, colours = folder.read_classes(str(tmp_path / "classes.txt"))
    assert names == ("sky", "chest of drawers", "car", "big red fire truck")
    np.testing.assert_array_equal(colours, voc.color_map(4))


@pytest.mark.parametrize("text,message", [
    ("", "no classes in"),
    ("sky\nsky\n", "a class is listed twice in"),
    ("sky 1 2 3\nroad\n", "gives R G B for some classes only"),
    ("sky 1 2 300\n", "colour out of 0-255 in line 'sky 1 2 300' of"),
    ("".join(f"c{k}\n" for k in range(256)), "256 classes in"),
])
def test_a_bad_class_list_is_named(tmp_path, text, message):
    path = tmp_path / "classes.txt"
    path.write_text(text)
    with pytest.raises(InputError) as error:
        folder.read_classes(str(path))
    assert message in str(error.value) and str(path) in str(error.value)


def test_a_missing_class_list_is_named(tmp_path):
    _tree(tmp_path)
    os.remove(tmp_path / "classes.txt")
    with pytest.raises(InputError, match=f"class list not found: {tmp_path / 'classes.txt'}"):
        folder.source(str(tmp_path), "train")


def test_pairs_are_matched_by_stem_and_sorted(tmp_path):
    _tree(tmp_path)
    (tmp_path / "train" / "images" / "readme.txt").write_text("not an image")
    pairs = folder.files(str(tmp_path), "train")
    assert [tuple(os.path.basename(p) for p in pair) for pair in pairs] == [
        ("a.png", "a.png"), ("b.jpg", "b.png"), ("c.JPEG", "c.png")]
    assert all(os.path.dirname(m) == str(tmp_path / "train" / "masks") for _, m in pairs)


def test_masks_decode_exactly_and_unknown_values_are_counted(tmp_path):
    masks = _tree(tmp_path, stems=("a", "b"), exts=(".png", ".jpg"))
    masks["b"][2:4, 3:8] = 7  # not a class, not 255
    save(tmp_path / "train" / "masks" / "b.png", masks["b"])
    source = folder.source(str(tmp_path), "train")
    assert source.num_classes == 3
    stats = DataStats()
    decoded = _decoded(source, stats)
    np.testing.assert_array_equal(decoded[0][1], masks["a"])
    np.testing.assert_array_equal(decoded[1][1], np.where(masks["b"] == 7, 255, masks["b"]))
    assert stats.as_dict()["unknown_label_pixels"] == 10
    assert stats.as_dict()["unknown_label_examples"] == 1


def test_palette_masks_are_read_as_indices_not_colours(tmp_path):
    """Every palette entry black: colours would say nothing, the indices say it all."""
    (tmp_path / "classes.txt").write_text("a\nb\nc\n")
    mask = _mask((11, 19), 3)
    _image(tmp_path / "val" / "images" / "x.png", (11, 19))
    palette_mask(tmp_path / "val" / "masks" / "x.png", mask, [0] * 768)
    (_, label), = _decoded(folder.source(str(tmp_path), "val"))
    np.testing.assert_array_equal(label, mask)


def test_an_image_without_mask_and_a_mask_without_image_are_named(tmp_path):
    _tree(tmp_path)
    os.remove(tmp_path / "train" / "masks" / "b.png")
    with pytest.raises(FileNotFoundError, match=f"mask for image {tmp_path}/train/images/b.jpg "
                       f"not found: {tmp_path}/train/masks/b.png"):
        folder.files(str(tmp_path), "train")
    save(tmp_path / "train" / "masks" / "b.png", _mask((13, 17), 0))
    os.remove(tmp_path / "train" / "images" / "c.JPEG")
    with pytest.raises(FileNotFoundError, match=f"image for mask {tmp_path}/train/masks/c.png"):
        folder.files(str(tmp_path), "train")


def test_unmatched_files_are_skipped_and_counted_with_skip_bad_examples(tmp_path):
    masks = _tree(tmp_path)
    os.remove(tmp_path / "train" / "masks" / "b.png")
    os.remove(tmp_path / "train" / "images" / "c.JPEG")
    config = DataConfig(dataset="folder", root=str(tmp_path), batch_size=1,
                        skip_bad_examples=True)
    dataset, stats = build_dataset_with_stats(config, training=False)
    labels = [label.numpy()[0] for _, label in dataset]
    assert len(labels) == 1 and stats.as_dict()["bad_examples"] == 2
    np.testing.assert_array_equal(labels[0], masks["a"])


def test_two_images_with_one_stem_are_named(tmp_path):
    _tree(tmp_path)
    _image(tmp_path / "train" / "images" / "a.jpg", (13, 17))
    with pytest.raises(InputError, match="two files named a in .*: a.jpg and a.png"):
        folder.files(str(tmp_path), "train")


def test_batches_through_the_real_pipeline(tmp_path):
    masks = _tree(tmp_path, split="val", stems=("p", "q", "r"), exts=(".png",) * 3,
                  size=(97, 129))
    config = DataConfig(dataset="folder", root=str(tmp_path), split="val", batch_size=2,
                        crop_size=(33, 49), seed=2, deterministic=True)
    (image, label), = [(i.numpy(), l.numpy()) for i, l in
                       build_dataset(config, training=True, epochs=1)]
    assert image.shape == (2, 33, 49, 3) and label.shape == (2, 33, 49)
    assert set(np.unique(label)) == {0, 1, 2, 255}
    batches = [(i.numpy(), l.numpy()) for i, l in build_dataset(config, training=False)]
    assert [i.shape for i, _ in batches] == [(2, 97, 129, 3), (1, 97, 129, 3)]
    np.testing.assert_array_equal(batches[1][1][0], masks["r"])
