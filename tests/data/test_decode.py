"""Bad input: real broken files, strict errors naming them, and skip mode."""

import numpy as np
import pytest
import tensorflow as tf

from tfseg.data import (DataConfig, DataStats, build_dataset, cityscapes, pairs_dataset,
                        pairs_to_examples)
from tests.data.trees import cityscapes_tree, save


def _break_image(path, kind):
    """Replace the image at ``path`` with a broken or unusual one; returns the array saved."""
    good = open(path, "rb").read()
    rng = np.random.default_rng(0)
    if kind == "truncated":
        open(path, "wb").write(good[: len(good) // 2])
    elif kind == "random_bytes":
        open(path, "wb").write(rng.integers(0, 256, 300, dtype=np.uint8).tobytes())
    elif kind == "empty":
        open(path, "wb").write(b"")
    else:
        array = {
            "grayscale": lambda: rng.integers(0, 256, (12, 16), dtype=np.uint8),
            "rgba": lambda: rng.integers(0, 256, (12, 16, 4), dtype=np.uint8),
            "16bit": lambda: rng.integers(0, 65536, (12, 16)).astype(np.uint16),
        }[kind]()
        save(path, array)
        return array
    return None


def _examples(root, skip=False, stats=None):
    source = cityscapes.source(str(root), "train")
    ds = pairs_to_examples(pairs_dataset(source.pairs), source, skip, stats, deterministic=True)
    return [(i.numpy(), l.numpy()) for i, l in ds]


@pytest.mark.parametrize("kind", ["truncated", "random_bytes", "empty"])
@pytest.mark.parametrize("broken", [0, 1, 2])  # first, middle and last pair
def test_corrupt_image_error_names_the_file(tmp_path, kind, broken):
    pairs = cityscapes_tree(tmp_path, n=3)
    _break_image(pairs[broken][0], kind)
    with pytest.raises(tf.errors.InvalidArgumentError, match=pairs[broken][0]):
        _examples(tmp_path)


def test_training_pipeline_names_a_corrupt_file(tmp_path):
    pairs = cityscapes_tree(tmp_path, n=4)
    _break_image(pairs[2][0], "truncated")
    config = DataConfig(root=str(tmp_path), crop_size=(8, 8), batch_size=1)  # not deterministic
    with pytest.raises(tf.errors.InvalidArgumentError, match=pairs[2][0]):
        list(build_dataset(config, training=True, epochs=1))


@pytest.mark.parametrize("kind", ["grayscale", "rgba", "16bit"])
def test_unusual_images_are_accepted_and_converted(tmp_path, kind):
    pairs = cityscapes_tree(tmp_path, n=1)
    array = _break_image(pairs[0][0], kind)
    (image, _), = _examples(tmp_path)
    assert image.shape == (12, 16, 3) and image.dtype == np.uint8
    if kind == "grayscale":
        np.testing.assert_array_equal(image, np.repeat(array[..., None], 3, -1))
    elif kind == "rgba":
        np.testing.assert_array_equal(image, array[..., :3])
    else:
        with open(pairs[0][0], "rb") as f:
            assert f.read(25)[24] == 16  # IHDR bit depth: PIL really wrote 16 bits
        # Scaled to 8 bits: the high byte (rounding may add 1), the same in R, G and B.
        high = np.repeat((array >> 8)[..., None], 3, -1).astype(int)
        assert np.abs(image.astype(int) - high).max() <= 1


@pytest.mark.parametrize("label", [
    np.zeros((12, 16, 3), np.uint8),        # RGB "labelIds"
    np.zeros((12, 16, 4), np.uint8),        # RGBA
    np.full((12, 16), 7, np.uint16),        # 16-bit
], ids=["rgb", "rgba", "16bit"])
def test_labels_of_the_wrong_kind_are_rejected_by_name(tmp_path, label):
    pairs = cityscapes_tree(tmp_path, n=1)
    save(pairs[0][1], label)
    with pytest.raises(tf.errors.InvalidArgumentError, match=pairs[0][1] + " is not a single"):
        _examples(tmp_path)


@pytest.mark.parametrize("kind", ["truncated", "random_bytes", "empty"])
def test_corrupt_label_is_named(tmp_path, kind):
    pairs = cityscapes_tree(tmp_path, n=1)
    good = open(pairs[0][1], "rb").read()
    broken = {"truncated": good[:60], "empty": b"",
              "random_bytes": np.random.default_rng(0).integers(0, 256, 300, np.uint8).tobytes()}
    open(pairs[0][1], "wb").write(broken[kind])
    with pytest.raises(tf.errors.InvalidArgumentError, match=pairs[0][1]):
        _examples(tmp_path)


def test_size_mismatch_names_both_files(tmp_path):
    pairs = cityscapes_tree(tmp_path, n=1)
    save(pairs[0][1], np.full((12, 15), 7, np.uint8))
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        _examples(tmp_path)
    assert pairs[0][0] in str(error.value) and pairs[0][1] in str(error.value)
    assert "12x16" in str(error.value) and "12x15" in str(error.value)


def test_skip_mode_counts_logs_and_drops_bad_pairs(tmp_path, capfd):
    pairs = cityscapes_tree(tmp_path, n=5)
    _break_image(pairs[0][0], "truncated")
    _break_image(pairs[2][0], "random_bytes")
    save(pairs[3][1], np.full((3, 3), 7, np.uint8))
    stats = DataStats()
    good = _examples(tmp_path, skip=True, stats=stats)
    assert len(good) == 2
    assert stats.as_dict()["bad_examples"] == 3
    log = capfd.readouterr().err
    for bad in (pairs[0][0], pairs[2][0], pairs[3][1]):
        assert bad in log
