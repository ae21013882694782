"""The class legend under predict's overlays (tfseg/evaluation/legend.py): the image's own
pixels on top, then a swatch of each class present in the labels, and none of the others."""

import numpy as np

from tfseg.data import cityscapes
from tfseg.evaluation.legend import SWATCH, present_classes, with_legend


def _has_block(pixels, colour, side):
    """Whether ``pixels`` (uint8 [H, W, 3]) hold a ``side`` x ``side`` block of ``colour``."""
    match = np.all(pixels == np.asarray(colour, np.uint8), -1).astype(np.int64)
    sums = np.pad(match.cumsum(0).cumsum(1), ((1, 0), (1, 0)))
    blocks = (sums[side:, side:] - sums[:-side, side:] - sums[side:, :-side]
              + sums[:-side, :-side])
    return bool((blocks == side * side).any())


def _image(height, width, classes):
    """(labels [H, W] of vertical bands of ``classes`` with a 255 corner, an overlay)."""
    labels = np.repeat(np.array(classes)[np.arange(width) * len(classes) // width][None],
                       height, 0)
    labels[:3, :3] = 255
    overlay = np.random.default_rng(0).integers(0, 256, (height, width, 3), np.uint8)
    return labels, overlay


def test_a_swatch_for_each_class_present_and_the_image_unchanged_above():
    palette, names = np.asarray(cityscapes.PALETTE, np.uint8), cityscapes.CLASS_NAMES
    present = [0, 2, 10, 13, 18]  # road, building, sky, car, bicycle
    labels, overlay = _image(37, 61, present)
    drawn = with_legend(overlay, labels, names, palette)
    assert drawn.dtype == np.uint8 and drawn.shape[2] == 3
    assert drawn.shape[0] > 37 + SWATCH and drawn.shape[1] >= 61
    np.testing.assert_array_equal(drawn[:37, :61], overlay)
    strip = drawn[37:]
    inside = SWATCH - 2  # within the 1-pixel outline
    for c in range(len(names)):
        assert _has_block(strip, palette[c], inside) == (c in present), names[c]
    # Names are drawn in black beside the swatches: dark text pixels in the strip.
    assert (strip.sum(-1) < 100).sum() > len(present) * 4 * SWATCH


def test_the_strip_wraps_to_the_image_width_and_widens_for_a_long_name():
    palette, names = np.asarray(cityscapes.PALETTE, np.uint8), cityscapes.CLASS_NAMES
    wide = with_legend(*_image(20, 400, list(range(19)))[::-1], names, palette)
    labels, overlay = _image(20, 60, list(range(19)))
    narrow = with_legend(overlay, labels, names, palette)
    assert wide.shape[1] == 400 and narrow.shape[0] > wide.shape[0]  # more lines
    assert 60 < narrow.shape[1] < 200  # wider than the image: as wide as "traffic light"
    assert present_classes(labels, 19) == list(range(19))
    for c in range(19):
        assert _has_block(narrow[20:], palette[c], SWATCH - 2)


def test_present_classes_skip_the_ignore_label_and_unknown_ids():
    assert present_classes(np.array([[3, 3, 255], [0, 7, 3]]), 5) == [0, 3]
