"""A generic folder layout: images and index masks paired by file name.

Layout::

    root/classes.txt              one class per line: NAME, or NAME R G B
    root/{split}/images/STEM.jpg  (.jpg, .jpeg or .png)
    root/{split}/masks/STEM.png   class index per pixel, 255 = ignore

A mask is a grayscale or palette PNG of at most 8 bits; a palette mask is read
as its palette *indices* (``png.decode_index_png``), not its colours. Values
0..N-1 are the classes of ``classes.txt`` in order; any other value but 255
becomes 255 and is counted as unknown. Colours in ``classes.txt`` are given
for every class or for none (then the VOC colour map is used).
"""

import os

import numpy as np

from tfseg.data import voc
from tfseg.data.registry import register_reader
from tfseg.data.source import (IGNORE_LABEL, index_png_source, require_dir, require_pair_file,
                               require_pairs)
from tfseg.errors import InputError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
MASK_EXTENSION = ".png"
CLASS_FILE = "classes.txt"


def _parse_line(line, path):
    """(name, (r, g, b) or None) of one ``classes.txt`` line."""
    words = line.split()
    try:
        rgb = tuple(int(w) for w in words[-3:]) if len(words) > 3 else None
    except ValueError:
        rgb = None  # a name of four or more words
    if rgb is not None and not all(0 <= v <= 255 for v in rgb):
        raise InputError(f"colour out of 0-255 in line {line.strip()!r} of {path}")
    return " ".join(words[:-3] if rgb else words), rgb


def read_classes(path):
    """Parse ``classes.txt`` -> (names tuple, palette uint8 [N, 3]).

    Raises ``InputError`` naming the file when it is missing or empty, names a
    class twice, has more than 255 classes (255 is "ignore"), or gives colours
    for some classes only.
    """
    if not os.path.isfile(path):
        raise InputError(f"class list not found: {path} (one class name per line)")
    with open(path, encoding="utf-8-sig") as f:
        rows = [_parse_line(line, path) for line in f if line.strip()]
    names = tuple(name for name, _ in rows)
    colours = [rgb for _, rgb in rows if rgb is not None]
    if not names:
        raise InputError(f"no classes in {path}")
    if len(names) > IGNORE_LABEL:
        raise InputError(f"{len(names)} classes in {path}; at most {IGNORE_LABEL} "
                         f"fit masks of 8 bits with {IGNORE_LABEL} = ignore")
    if len(set(names)) != len(names):
        raise InputError(f"a class is listed twice in {path}")
    if colours and len(colours) != len(names):
        raise InputError(f"{path} gives R G B for some classes only; give it for "
                         f"every class or for none")
    palette = np.array(colours, np.uint8) if colours else voc.color_map(len(names))
    return names, palette


def _by_stem(folder, extensions):
    """{stem: path} of the files in ``folder`` with one of ``extensions`` (any case)."""
    found = {}
    for name in sorted(os.listdir(folder)):
        stem, ext = os.path.splitext(name)
        if ext.lower() in extensions:
            if stem in found:
                raise InputError(f"two files named {stem} in {folder}: "
                                 f"{os.path.basename(found[stem])} and {name}")
            found[stem] = os.path.join(folder, name)
    return found


def files(root, split, missing_ok=False):
    """List ``(image_path, mask_path)`` pairs of ``root/{split}``, sorted by stem.

    Raises:
      FileNotFoundError: a folder is missing, or an image has no mask or a mask
        no image (the missing file is named). With ``missing_ok`` the pair is
        listed with the missing path (the mask's, or ``images/STEM.jpg``) and
        the decode stage counts and skips it.
      InputError: the split holds no images, or two images (masks) share a stem.
    """
    image_dir = require_dir(os.path.join(root, split, "images"))
    mask_dir = require_dir(os.path.join(root, split, "masks"))
    images = _by_stem(image_dir, IMAGE_EXTENSIONS)
    masks = _by_stem(mask_dir, (MASK_EXTENSION,))
    require_pairs(images, image_dir)
    pairs = []
    for stem in sorted(set(images) | set(masks)):
        image = images.get(stem) or require_pair_file(
            os.path.join(image_dir, stem + ".jpg"), f"image for mask {masks[stem]} "
            f"({'/'.join(IMAGE_EXTENSIONS)})", missing_ok)
        mask = masks.get(stem) or require_pair_file(
            os.path.join(mask_dir, stem + MASK_EXTENSION), f"mask for image {image}", missing_ok)
        pairs.append((image, mask))
    return tuple(pairs)


@register_reader("folder",
                 classes=lambda root, split: read_classes(os.path.join(root, CLASS_FILE)),
                 layout="classes.txt, SPLIT/images/* and SPLIT/masks/*.png",
                 docs="a-folder-of-images-and-masks", marks=(CLASS_FILE,))
def source(root, split, missing_ok=False):
    """The split as a ``Source``; classes and palette come from ``classes.txt``;
    ``missing_ok`` as ``files``."""
    names, palette = read_classes(os.path.join(root, CLASS_FILE))
    return index_png_source("folder", files(root, split, missing_ok), names, palette,
                            {i: i for i in range(len(names))})
