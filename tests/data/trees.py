"""Write tiny real data set trees with PIL for the data tests."""

import os

import numpy as np
from PIL import Image

from tfseg.data import voc


def save(path, array, mode=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(array, mode).save(path)
    return str(path)


def cityscapes_tree(root, split="train", ids=None, size=(12, 16), n=2, city="town"):
    """n image/labelIds pairs; labelIds filled from ``ids`` (cycled) so each value occurs."""
    ids = list(range(34)) if ids is None else list(ids)
    pairs = []
    for i in range(n):
        label = np.array(ids, np.uint8)[np.arange(size[0] * size[1]).reshape(size) % len(ids)]
        label = np.roll(label, i, axis=1)
        image = np.random.default_rng(i).integers(0, 256, size + (3,), dtype=np.uint8)
        stem = f"{city}_{i:06d}_000019"
        pairs.append((save(os.path.join(root, "leftImg8bit", split, city,
                                        stem + "_leftImg8bit.png"), image),
                      save(os.path.join(root, "gtFine", split, city,
                                        stem + "_gtFine_labelIds.png"), label)))
    return pairs


def voc_tree(root, sizes=((10, 14), (12, 9)), split="train"):
    """VOC2012 layout with JPEG images and palette labels (VOC palette); returns index arrays."""
    labels = []
    ids = []
    palette = voc.color_map(256).reshape(-1).tolist()
    for i, size in enumerate(sizes):
        rng = np.random.default_rng(i)
        label = rng.integers(0, 21, size).astype(np.uint8)
        label[0, :] = 255
        name = f"2007_{i:06d}"
        save(os.path.join(root, "JPEGImages", name + ".jpg"),
             rng.integers(0, 256, size + (3,), dtype=np.uint8))
        os.makedirs(os.path.join(root, "SegmentationClass"), exist_ok=True)
        im = Image.fromarray(label, "P")
        im.putpalette(palette)
        im.save(os.path.join(root, "SegmentationClass", name + ".png"))
        labels.append(label)
        ids.append(name)
    os.makedirs(os.path.join(root, "ImageSets", "Segmentation"), exist_ok=True)
    with open(os.path.join(root, "ImageSets", "Segmentation", split + ".txt"), "w") as f:
        f.write("\n".join(ids) + "\n")
    return labels


def ade20k_tree(root, sizes=((97, 129), (9, 13)), folder="training"):
    """ADEChallengeData2016 layout: JPEG images, grayscale annotations holding every value
    0-255 (cycled); returns the annotation arrays, in file order."""
    annotations = []
    for i, size in enumerate(sizes):
        rng = np.random.default_rng(i)
        annotation = ((np.arange(size[0] * size[1]) * 7 + i) % 256).astype(np.uint8)
        annotation = annotation.reshape(size)
        name = f"ADE_{folder[:5]}_{i + 1:08d}"
        save(os.path.join(root, "images", folder, name + ".jpg"),
             rng.integers(0, 256, size + (3,), dtype=np.uint8))
        save(os.path.join(root, "annotations", folder, name + ".png"), annotation)
        annotations.append(annotation)
    return annotations


def palette_mask(path, mask, colours):
    """Save ``mask`` as a palette PNG whose palette is ``colours`` (flat list of 768)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    im = Image.fromarray(mask, "P")
    im.putpalette(colours)
    im.save(path)
    return str(path)
