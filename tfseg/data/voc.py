"""Pascal VOC 2012 reader: JPEG images with palette-PNG class labels.

The label PNGs are palette images whose *index* is the class (0-20) and 255
the object border. ``tf.io.decode_png`` would return the palette colours, so
labels go through ``png.decode_index_png``, which reads the indices exactly
in pure TF (see its docstring for why not a colour -> index lookup).
"""

import os

import numpy as np

from tfseg.data.registry import register_reader
from tfseg.data.source import (index_png_source, require_dir, require_file, require_pair_file,
                               require_pairs)

CLASS_NAMES = (
    "background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car",
    "cat", "chair", "cow", "diningtable", "dog", "horse", "motorbike", "person",
    "pottedplant", "sheep", "sofa", "train", "tvmonitor",
)
NUM_CLASSES = len(CLASS_NAMES)
KNOWN_LABEL_IDS = {i: i for i in range(NUM_CLASSES)}


def color_map(n=256):
    """The VOC devkit palette (labelcolormap.m): uint8 [n, 3]."""
    cmap = np.zeros((n, 3), np.uint8)
    for i in range(n):
        c, r, g, b = i, 0, 0, 0
        for j in range(8):
            r |= ((c >> 0) & 1) << (7 - j)
            g |= ((c >> 1) & 1) << (7 - j)
            b |= ((c >> 2) & 1) << (7 - j)
            c >>= 3
        cmap[i] = (r, g, b)
    return cmap


PALETTE = color_map(NUM_CLASSES)


def files(root, split, missing_ok=False):
    """List ``(image_path, label_path)`` pairs named by ``ImageSets/Segmentation/{split}.txt``.

    Args:
      root: the ``VOC2012`` folder (holding JPEGImages, SegmentationClass, ImageSets).
      split: "train", "val", "trainval" or any other list file's stem.

    Raises:
      FileNotFoundError: a folder, the list file or a listed file is missing (named); a
        missing listed file is kept anyway when ``missing_ok``.
      ValueError: the list file names no examples (it is named).
    """
    image_dir = require_dir(os.path.join(root, "JPEGImages"))
    label_dir = require_dir(os.path.join(root, "SegmentationClass"))
    list_file = require_file(os.path.join(root, "ImageSets", "Segmentation", split + ".txt"),
                             "split list")
    with open(list_file) as f:
        ids = [line.split()[0] for line in f if line.strip()]
    require_pairs(ids, list_file)
    return tuple((require_pair_file(os.path.join(image_dir, i + ".jpg"), "image", missing_ok),
                  require_pair_file(os.path.join(label_dir, i + ".png"), "label file", missing_ok))
                 for i in ids)


@register_reader("voc", classes=(CLASS_NAMES, PALETTE),
                 layout="JPEGImages/, SegmentationClass/ and "
                        "ImageSets/Segmentation/SPLIT.txt (it is VOCdevkit/VOC2012)",
                 docs="pascal-voc-2012", marks=("JPEGImages", "SegmentationClass"))
def source(root, split, missing_ok=False):
    """The split as a ``Source`` (21 classes, 255 = border/ignore); ``missing_ok`` as
    ``files``."""
    return index_png_source("voc", files(root, split, missing_ok), CLASS_NAMES, PALETTE,
                            KNOWN_LABEL_IDS, "a palette (or grayscale) PNG of at most 8 bits")
