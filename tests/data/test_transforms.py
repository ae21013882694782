import numpy as np
import pytest
import tensorflow as tf

from tfseg.data import transforms
from tfseg.data.source import IndexLabels
from tfseg.models import normalize
from tests.data.conftest import run_eager_and_in_map

COLOURS = np.array([(200, 30, 30), (30, 200, 30), (30, 30, 200), (220, 220, 40)], np.float32)


def _scene(seed=0, size=(60, 84), block=10):
    """Label made of square blocks of random classes (some 255); image colour = f(class)."""
    rng = np.random.default_rng(seed)
    blocks = rng.choice([0, 1, 2, 3, 255], size=(size[0] // block + 1, size[1] // block + 1))
    label = np.kron(blocks, np.ones((block, block), int))[:size[0], :size[1]].astype(np.int32)
    image = np.where(label[..., None] == 255, 0, COLOURS[np.minimum(label, 3)])
    return image.astype(np.uint8), label


def _interior(label, radius=2):
    """Pixels whose (2r+1)^2 neighbourhood has a single label (away from class edges).

    The crop border is never interior: its bilinear samples may mix in image
    pixels just outside the crop, whose labels the crop does not show.
    """
    padded = np.pad(label, radius, constant_values=-1)
    same = np.ones(label.shape, bool)
    h, w = label.shape
    for dy in range(2 * radius + 1):
        for dx in range(2 * radius + 1):
            same &= padded[dy:dy + h, dx:dx + w] == label
    return same


def _assert_labels_kept_and_aligned(out_image, out_label, label, crop):
    """Output labels are input labels or 255, and every pixel's colour is its label's."""
    assert out_image.shape == crop + (3,) and out_label.shape == crop
    assert set(np.unique(out_label)) <= set(np.unique(label)) | {255}
    inside = _interior(out_label) & (out_label != 255)
    assert inside.sum() > 30  # the alignment check below is not vacuous
    np.testing.assert_allclose(out_image[inside], COLOURS[out_label[inside]], atol=1.0)
    # Padding, where present, is the mean colour under label 255.
    padding = np.all(out_image == transforms.PAD_VALUE, axis=-1)
    assert np.all(out_label[padding] == 255)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("crop", [(32, 48), (96, 120)])  # smaller and larger than the image
def test_scale_crop_keeps_labels_and_alignment(seed, crop):
    image, label = _scene(seed)
    out_image, out_label = transforms.random_scale_crop(
        image, label, tf.constant([seed, 7]), crop, (0.5, 2.0))
    _assert_labels_kept_and_aligned(out_image.numpy(), out_label.numpy(), label, crop)


@pytest.mark.parametrize("crop", [(32, 48), (96, 120)])
def test_train_transform_flip_keeps_labels_and_alignment(crop):
    """The flip draw of ``random_flip``: both outcomes keep labels and stay aligned."""
    image, label = _scene(6)
    flipped_seen = set()
    for seed in range(8):
        seed = tf.constant([seed, 11])
        out_image, out_label = (t.numpy() for t in transforms.train_transform(
            image, label, seed, crop, flip=True))
        # The same seed without the flip draws the same crop: the reference.
        unflipped = transforms.train_transform(image, label, seed, crop, flip=False)[1].numpy()
        assert not np.array_equal(unflipped, unflipped[:, ::-1])  # the outcomes differ
        flipped = np.array_equal(out_label, unflipped[:, ::-1])
        assert flipped or np.array_equal(out_label, unflipped)
        flipped_seen.add(flipped)
        assert out_image.dtype == np.uint8
        _assert_labels_kept_and_aligned(out_image, out_label, label, crop)
    assert flipped_seen == {True, False}


def test_scale_crop_identity_at_scale_one():
    image, label = _scene(1)
    out_image, out_label = transforms.random_scale_crop(
        image, label, tf.constant([1, 2]), label.shape, (1.0, 1.0))
    np.testing.assert_allclose(out_image.numpy(), image, atol=0.5)
    np.testing.assert_array_equal(out_label.numpy(), label)


@pytest.mark.parametrize("scales, crop", [
    ((1.5, 1.5), (90, 40)),  # the crop spans every row of the 90x126 scaled image
    ((1.5, 1.5), (100, 40)),  # ... and pads 10 rows below them, no columns
    ((0.5, 0.9), (70, 100)),  # pads both ways
    ((1.2, 2.0), (40, 56)),
])
def test_scale_crop_marks_255_exactly_where_it_pads(scales, crop):
    """Without 0 or 255 in the input, 255 is the padding and nothing else, and no
    sample falls off the label's edge (crop_and_resize would fill it with 0)."""
    image, label = _scene(7)
    label = np.where(label == 255, 4, label + 1)
    for seed in range(6):
        out_image, out_label = (t.numpy() for t in transforms.random_scale_crop(
            image, label, tf.constant([seed, 3]), crop, scales))
        padding = np.all(out_image == transforms.PAD_VALUE, axis=-1)
        np.testing.assert_array_equal(out_label == 255, padding)
        assert set(np.unique(out_label)) <= set(np.unique(label)) | {255}
        assert padding.any() == (scales[1] < 1 or crop[0] == 100)


def test_scale_crop_aligns_a_single_output_row():
    """A crop showing one row of the scaled image: image and label sample the same row."""
    label = np.repeat(np.arange(5)[:, None] % 4, 6, axis=1)
    image = COLOURS[label].astype(np.uint8)
    for seed in range(4):
        out_image, out_label = (t.numpy() for t in transforms.random_scale_crop(
            image, label, tf.constant([seed, 1]), (4, 8), (0.2, 0.2)))
        assert (out_label != 255).sum() == 1  # the 5x6 image scaled to 1x1
        np.testing.assert_allclose(out_image[0, 0], COLOURS[out_label[0, 0]], atol=1.0)


@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("known", [
    {30: 2, 31: 0, 32: 1, 33: 255},  # a real table: gathered
    {i: i for i in range(31)},  # keeps ids below 31: one compare
])
def test_train_transform_maps_labels_after_the_crop(flip, known):
    """``map_label`` on the crop (in XLA) equals mapping the crop's ids afterwards."""
    image, label = _scene(8)
    ids = np.where(label == 255, 255, label + 30).astype(np.uint8)  # stored ids 30-33
    table = IndexLabels(known)
    for seed in range(4):
        seed = tf.constant([seed, 5])
        _, mapped = transforms.train_transform(image, ids, seed, (32, 48), flip=flip,
                                               map_label=table.map_ids)
        _, stored = transforms.train_transform(image, ids, seed, (32, 48), flip=flip)
        assert mapped.dtype == tf.int32
        np.testing.assert_array_equal(mapped, table.map_ids(stored))
        assert len(np.unique(mapped)) > 1


def test_flip_moves_image_and_label_together():
    image, label = _scene(2)
    flipped = [transforms.random_flip(image, label, tf.constant([s, 0])) for s in range(8)]
    kinds = set()
    for out_image, out_label in flipped:
        same = np.array_equal(out_label.numpy(), label)
        kinds.add(same)
        want = (image, label) if same else (image[:, ::-1], label[:, ::-1])
        np.testing.assert_array_equal(out_image.numpy(), want[0])
        np.testing.assert_array_equal(out_label.numpy(), want[1])
    assert kinds == {True, False}


def test_jitter_changes_colour_within_range():
    image, _ = _scene(3)
    out = transforms.photometric_jitter(image, tf.constant([3, 3])).numpy()
    assert out.shape == image.shape and out.min() >= 0 and out.max() <= 255
    assert not np.allclose(out, image)


def test_to_uint8_rounds_half_to_even_and_clips():
    out = transforms.to_uint8(np.array([-3, 0.4, 126.5, 127.5, 128.5, 254.6, 300], np.float32))
    np.testing.assert_array_equal(out.numpy(), [0, 0, 126, 128, 128, 255, 255])
    assert out.dtype == tf.uint8


def test_pad_value_is_the_uint8_nearest_the_models_zero():
    """The model sees 127.5 as 0; the pad is one of the two uint8 values 1/255 from it."""
    gap = abs(float(normalize(np.uint8(transforms.PAD_VALUE))))
    assert gap == pytest.approx(1 / 255, rel=1e-4) and transforms.PAD_VALUE == np.round(127.5)


@pytest.mark.parametrize("name", ["scale_crop", "flip", "jitter", "train", "eval"])
def test_every_transform_runs_eagerly_and_in_dataset_map(name):
    image, label = _scene(4)
    seed = tf.constant([4, 2], tf.int64)
    fn = {
        "scale_crop": lambda i, l, s: transforms.random_scale_crop(i, l, s, (24, 40)),
        "flip": transforms.random_flip,
        "jitter": lambda i, l, s: transforms.photometric_jitter(i, s),
        "train": lambda i, l, s: transforms.train_transform(i, l, s, (24, 40), jitter=True),
        "eval": lambda i, l, s: transforms.eval_transform(i, l),
    }[name]
    eager, mapped = run_eager_and_in_map(fn, tf.constant(image), tf.constant(label), seed)
    for a, b in zip(tf.nest.flatten(eager), tf.nest.flatten(mapped)):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_train_transform_output_contract():
    image, label = _scene(5)
    out_image, out_label = transforms.train_transform(image, label, tf.constant([5, 5]),
                                                      (24, 40), jitter=True)
    assert out_image.dtype == tf.uint8 and out_label.dtype == tf.int32
    assert out_image.shape == (24, 40, 3) and out_label.shape == (24, 40)


@pytest.mark.parametrize("seed", range(4))
def test_train_transform_is_the_float_crop_rounded(seed):
    """The only change uint8 output makes: each value within 0.5 of the float crop (the
    same crop: ``train_transform`` draws it from the first of three split seeds)."""
    image, label = _scene(9, size=(37, 53))
    seed = tf.constant([seed, 9], tf.int64)
    crop_seed = tf.random.experimental.stateless_split(seed, 3)[0]
    rounded, _ = transforms.train_transform(image, label, seed, (25, 31), (0.7, 1.6),
                                            flip=False)
    exact, _ = transforms.random_scale_crop(image, label, crop_seed, (25, 31), (0.7, 1.6))
    difference = np.abs(rounded.numpy().astype(np.float32) - exact.numpy())
    assert difference.max() <= 0.5 and difference.max() > 0  # bilinear blends: not whole
