import filecmp
import os

import numpy as np
import pytest
from PIL import Image

from tfseg.data import cityscapes, synthetic, write_synthetic_cityscapes


def test_layout_and_real_label_ids(synthetic_root):
    train = cityscapes.files(synthetic_root, "train")
    val = cityscapes.files(synthetic_root, "val")
    assert (len(train), len(val)) == (6, 3)
    ids = np.unique(np.concatenate([np.asarray(Image.open(l)).ravel() for _, l in train]))
    assert set(ids) <= set(synthetic.LABEL_IDS)
    assert {1, 7, 23} <= set(ids)  # ego vehicle (-> 255), road, sky
    assert Image.open(train[0][0]).size == (80, 48) and Image.open(train[0][0]).mode == "RGB"


def test_deterministic_and_idempotent(tmp_path, synthetic_root):
    other = write_synthetic_cityscapes(str(tmp_path), 6, 3, 48, 80, seed=3)
    for (a, b), (c, d) in zip(cityscapes.files(synthetic_root, "train"),
                              cityscapes.files(other, "train")):
        assert filecmp.cmp(a, c, shallow=False) and filecmp.cmp(b, d, shallow=False)
    first = cityscapes.files(other, "val")[0][0]
    mtime = os.stat(first).st_mtime_ns
    write_synthetic_cityscapes(str(tmp_path), 6, 3, 48, 80, seed=3)
    assert os.stat(first).st_mtime_ns == mtime
    with pytest.raises(ValueError, match=str(tmp_path)):
        write_synthetic_cityscapes(str(tmp_path), 6, 3, 48, 80, seed=4)


def test_classes_are_separable_by_colour_alone(synthetic_root):
    """A nearest-mean-colour classifier fitted on train already does well on val."""
    def pixels(split):
        pairs = cityscapes.files(synthetic_root, split)
        images = np.concatenate([np.asarray(Image.open(i)).reshape(-1, 3) for i, _ in pairs])
        ids = np.concatenate([np.asarray(Image.open(l)).ravel() for _, l in pairs])
        return images.astype(float), ids

    x, y = pixels("train")
    classes = np.unique(y)
    means = np.stack([x[y == c].mean(0) for c in classes])
    xv, yv = pixels("val")
    predicted = classes[np.argmin(((xv[:, None] - means[None]) ** 2).sum(-1), 1)]
    assert (predicted == yv).mean() > 0.8
