"""ADE20K SceneParsing reader (the ADEChallengeData2016 release, 150 classes).

Layout::

    root/images/training/*.jpg         root/annotations/training/*.png
    root/images/validation/*.jpg       root/annotations/validation/*.png
    root/objectInfo150.csv or .txt     optional: overrides the class names

The annotations are grayscale PNGs: 0 is "other" (not one of the 150 classes)
and 1-150 the classes, so a label is its value - 1 and 0 becomes 255
(ignore), as the benchmark scores it. Values 151-254 are not defined and
become 255, counted as unknown; 255 is "ignore" as in every reader here.
The mapping is an ``IndexLabels`` table (pure TF), which training applies
after cropping the stored values.

Split names ``train`` and ``val`` mean the release's ``training`` and
``validation`` folders; any other name is used as the folder's name.
"""

import csv
import glob
import os

from tfseg.data import voc
from tfseg.data.registry import register_reader
from tfseg.data.source import (IGNORE_LABEL, index_png_source, require_dir, require_pair_file,
                               require_pairs)
from tfseg.errors import InputError

# objectInfo150's order (class k is annotation value k + 1), each row's first name.
CLASS_NAMES = (
    "wall", "building", "sky", "floor", "tree", "ceiling", "road", "bed", "windowpane",
    "grass", "cabinet", "sidewalk", "person", "earth", "door", "table", "mountain", "plant",
    "curtain", "chair", "car", "water", "painting", "sofa", "shelf", "house", "sea",
    "mirror", "rug", "field", "armchair", "seat", "fence", "desk", "rock", "wardrobe",
    "lamp", "bathtub", "railing", "cushion", "base", "box", "column", "signboard",
    "chest of drawers", "counter", "sand", "sink", "skyscraper", "fireplace",
    "refrigerator", "grandstand", "path", "stairs", "runway", "case", "pool table",
    "pillow", "screen door", "stairway", "river", "bridge", "bookcase", "blind",
    "coffee table", "toilet", "flower", "book", "hill", "bench", "countertop", "stove",
    "palm", "kitchen island", "computer", "swivel chair", "boat", "bar", "arcade machine",
    "hovel", "bus", "towel", "light", "truck", "tower", "chandelier", "awning",
    "streetlight", "booth", "television receiver", "airplane", "dirt track", "apparel",
    "pole", "land", "bannister", "escalator", "ottoman", "bottle", "buffet", "poster",
    "stage", "van", "ship", "fountain", "conveyer belt", "canopy", "washer", "plaything",
    "swimming pool", "stool", "barrel", "basket", "waterfall", "tent", "bag", "minibike",
    "cradle", "oven", "ball", "food", "step", "tank", "trade name", "microwave", "pot",
    "animal", "bicycle", "lake", "dishwasher", "screen", "blanket", "sculpture", "hood",
    "sconce", "vase", "traffic light", "tray", "ashcan", "fan", "pier", "crt screen",
    "plate", "monitor", "bulletin board", "shower", "radiator", "glass", "clock", "flag",
)
NUM_CLASSES = len(CLASS_NAMES)
# Not the benchmark's own colours: the VOC colour map's entries 1-150, which are
# distinct (the map is a bijection on 0-255) and skip black.
PALETTE = voc.color_map(NUM_CLASSES + 1)[1:]
KNOWN_LABEL_IDS = {0: IGNORE_LABEL, **{k: k - 1 for k in range(1, NUM_CLASSES + 1)}}
SPLIT_FOLDERS = {"train": "training", "val": "validation"}
CLASS_FILES = ("objectInfo150.csv", "objectInfo150.txt")


def class_file(root):
    """The path of the class list that overrides ``CLASS_NAMES``, or None."""
    return next((p for p in (os.path.join(root, n) for n in CLASS_FILES) if os.path.isfile(p)),
                None)


def read_class_names(path):
    """The ``Name`` column of an objectInfo150 file, cut at the first comma.

    The .txt shipped with the release is tab-separated with names such as
    ``building, edifice`` (synonyms after a comma); the .csv of the
    sceneparsing tools is comma-separated with ``;`` between words and
    synonyms alike, so its names are kept whole. Raises ``InputError``
    naming the file unless it has a ``Name`` column and 150 rows.
    """
    with open(path, encoding="utf-8-sig", newline="") as f:
        text = f.read()
    rows = [[c.strip() for c in row]
            for row in csv.reader(text.splitlines(), delimiter="\t" if "\t" in text else ",")
            if any(c.strip() for c in row)]
    header = [c.lower() for c in rows[0]] if rows else []
    if "name" not in header:
        raise InputError(f"no Name column in {path}")
    column = header.index("name")
    try:
        names = tuple(row[column].split(",")[0].strip() for row in rows[1:])
    except IndexError:
        raise InputError(f"a row without a name in {path}") from None
    if len(names) != NUM_CLASSES or not all(names):
        raise InputError(f"{path} must name {NUM_CLASSES} classes, one per row; "
                         f"it has {len(names)} rows")
    return names


def class_names(root):
    """``CLASS_NAMES``, or those of the root's objectInfo150 file when it has one."""
    path = class_file(root)
    return read_class_names(path) if path else CLASS_NAMES


def files(root, split, missing_ok=False):
    """List ``(image_path, annotation_path)`` pairs of one split, sorted by image name.

    Raises:
      FileNotFoundError: a folder or an image's annotation is missing (named); a
        missing annotation is listed anyway when ``missing_ok``.
      InputError: the split holds no .jpg images (the folder is named).
    """
    folder = SPLIT_FOLDERS.get(split, split)
    image_dir = require_dir(os.path.join(root, "images", folder))
    label_dir = require_dir(os.path.join(root, "annotations", folder))
    images = sorted(glob.glob(os.path.join(image_dir, "*.jpg")))
    require_pairs(images, image_dir)
    return tuple((image, require_pair_file(
        os.path.join(label_dir, os.path.splitext(os.path.basename(image))[0] + ".png"),
        "annotation for " + image, missing_ok)) for image in images)


@register_reader("ade20k", classes=lambda root, split: (class_names(root), PALETTE),
                 layout="images/{training,validation}/*.jpg and "
                        "annotations/{training,validation}/*.png",
                 docs="ade20k-sceneparsing-150-classes", marks=("images", "annotations"))
def source(root, split, missing_ok=False):
    """The split as a ``Source`` (150 classes, 0 = other -> 255); ``missing_ok`` as
    ``files``."""
    return index_png_source("ade20k", files(root, split, missing_ok), class_names(root),
                            PALETTE, KNOWN_LABEL_IDS)
