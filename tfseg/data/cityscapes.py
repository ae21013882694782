"""Cityscapes reader: leftImg8bit images with gtFine labelIds / labelTrainIds."""

import glob
import os

import numpy as np

from tfseg.data.registry import register_reader
from tfseg.data.source import (IGNORE_LABEL, index_png_source, require_dir, require_pair_file,
                               require_pairs)

# labelId -> trainId from cityscapesScripts' labels.py; every id not listed
# here (0-6, 9, 10, 14-16, 18, 29, 30) is "ignoreInEval" and maps to 255.
LABEL_ID_TO_TRAIN_ID = {
    7: 0, 8: 1, 11: 2, 12: 3, 13: 4, 17: 5, 19: 6, 20: 7, 21: 8, 22: 9,
    23: 10, 24: 11, 25: 12, 26: 13, 27: 14, 28: 15, 31: 16, 32: 17, 33: 18,
}
# Ids 0-33 are all defined by labels.py (license plate, -1, is never stored
# in the uint8 PNGs); anything else is counted as unknown.
KNOWN_LABEL_IDS = {i: LABEL_ID_TO_TRAIN_ID.get(i, IGNORE_LABEL) for i in range(34)}

CLASS_NAMES = (
    "road", "sidewalk", "building", "wall", "fence", "pole", "traffic light",
    "traffic sign", "vegetation", "terrain", "sky", "person", "rider", "car",
    "truck", "bus", "train", "motorcycle", "bicycle",
)
NUM_CLASSES = len(CLASS_NAMES)
# Official colours (labels.py), indexed by train id.
PALETTE = np.array([
    (128, 64, 128), (244, 35, 232), (70, 70, 70), (102, 102, 156), (190, 153, 153),
    (153, 153, 153), (250, 170, 30), (220, 220, 0), (107, 142, 35), (152, 251, 152),
    (70, 130, 180), (220, 20, 60), (255, 0, 0), (0, 0, 142), (0, 0, 70),
    (0, 60, 100), (0, 80, 100), (0, 0, 230), (119, 11, 32),
], np.uint8)

_IMAGE_SUFFIX = "_leftImg8bit.png"
_LABEL_IDS_SUFFIX = "_gtFine_labelIds.png"
_TRAIN_IDS_SUFFIX = "_gtFine_labelTrainIds.png"


def files(root, split, missing_ok=False):
    """List ``(image_path, label_path)`` pairs of one split, sorted.

    Uses ``*_gtFine_labelTrainIds.png`` when *every* image of the split has
    one (so that one mapping applies to the whole split), else
    ``*_gtFine_labelIds.png``.

    Raises:
      FileNotFoundError: a folder or an image's label file is missing (named); a
        missing label file is listed anyway when ``missing_ok``.
      ValueError: the split holds no images (the folder is named).
    """
    image_dir = require_dir(os.path.join(root, "leftImg8bit", split))
    label_dir = require_dir(os.path.join(root, "gtFine", split))
    images = sorted(glob.glob(os.path.join(image_dir, "*", "*" + _IMAGE_SUFFIX)))
    require_pairs(images, image_dir)
    stems = [os.path.join(label_dir, os.path.basename(os.path.dirname(p)),
                          os.path.basename(p)[:-len(_IMAGE_SUFFIX)]) for p in images]
    suffix = (_TRAIN_IDS_SUFFIX if all(os.path.isfile(s + _TRAIN_IDS_SUFFIX) for s in stems)
              else _LABEL_IDS_SUFFIX)
    return tuple((img, require_pair_file(s + suffix, "label file for " + img, missing_ok))
                 for img, s in zip(images, stems))


def label_mapping(label_path):
    """{stored id: train id} for a label file, chosen by its file name suffix."""
    if label_path.endswith(_TRAIN_IDS_SUFFIX):
        return {i: i for i in range(NUM_CLASSES)}
    return KNOWN_LABEL_IDS


@register_reader("cityscapes", classes=(CLASS_NAMES, PALETTE),
                 layout="leftImg8bit/SPLIT/CITY/*_leftImg8bit.png and "
                        "gtFine/SPLIT/CITY/*_gtFine_labelIds.png",
                 docs="cityscapes", marks=("leftImg8bit", "gtFine"))
def source(root, split, missing_ok=False):
    """The split as a ``Source`` (labels decoded and mapped to 19 train ids); ``missing_ok``
    as ``files``."""
    pairs = files(root, split, missing_ok)
    return index_png_source("cityscapes", pairs, CLASS_NAMES, PALETTE,
                            label_mapping(pairs[0][1]))
