import filecmp
import os

import numpy as np
import pytest
from PIL import Image

from tfseg.data import cityscapes, synthetic, write_synthetic_cityscapes
from tfseg.errors import InputError


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
    with pytest.raises(InputError, match=str(tmp_path)):
        write_synthetic_cityscapes(str(tmp_path), 6, 3, 48, 80, seed=4)


def test_every_class_is_separable_by_colour_alone(synthetic_root):
    """Per-class IoU of a nearest-mean-colour classifier, scored like mIoU.

    A stand-in for "a model learns it to a high mIoU quickly" (training itself
    is covered by the trainer tests): fitted on train pixels of the 8 train ids
    only (255 is ignored, as in training) and scored on val, ignoring 255.
    Pixel accuracy alone would hide a weak small class behind road and sky.
    """
    table = np.full(256, 255)
    table[list(cityscapes.KNOWN_LABEL_IDS)] = list(cityscapes.KNOWN_LABEL_IDS.values())

    def pixels(split):
        pairs = cityscapes.files(synthetic_root, split)
        colours = np.concatenate([np.asarray(Image.open(i)).reshape(-1, 3) for i, _ in pairs])
        train_ids = table[np.concatenate([np.asarray(Image.open(l)).ravel() for _, l in pairs])]
        keep = train_ids != 255
        return colours[keep].astype(float), train_ids[keep]

    x, y = pixels("train")
    classes = np.array(synthetic.TRAIN_IDS)
    means = np.stack([x[y == c].mean(0) for c in classes])
    xv, yv = pixels("val")
    assert set(np.unique(yv)) == set(classes)  # every class is scored
    predicted = classes[np.argmin(((xv[:, None] - means[None]) ** 2).sum(-1), 1)]
    iou = [np.sum((predicted == c) & (yv == c)) / np.sum((predicted == c) | (yv == c))
           for c in classes]
    assert np.mean(iou) > 0.9, dict(zip(classes, np.round(iou, 3)))
    assert min(iou) > 0.7, dict(zip(classes, np.round(iou, 3)))


def test_processes_writing_at_once_make_one_complete_set(tmp_path, synthetic_root):
    """The workers of a multi-worker run all write the default set on first use."""
    import subprocess
    import sys

    root = tmp_path / "data" / "synthetic"
    code = ("import sys; from tfseg.data import write_synthetic_cityscapes as w; "
            "w(sys.argv[1], 6, 3, 48, 80, seed=3)")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(root)], stderr=subprocess.PIPE,
                              text=True) for _ in range(3)]
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    for split in ("train", "val"):
        for (a, b), (c, d) in zip(cityscapes.files(synthetic_root, split),
                                  cityscapes.files(str(root), split), strict=True):
            assert filecmp.cmp(a, c, shallow=False) and filecmp.cmp(b, d, shallow=False)
    assert sorted(os.listdir(tmp_path / "data")) == ["synthetic"]  # no staging folder left


def test_a_partial_set_is_rewritten_and_other_files_kept(tmp_path, synthetic_root):
    root = tmp_path / "synthetic"
    (root / "leftImg8bit" / "train" / "synth0").mkdir(parents=True)
    (root / "leftImg8bit" / "train" / "synth0" / "stray_leftImg8bit.png").write_bytes(b"half")
    (root / "tfrecords").mkdir()
    (root / "tfrecords" / "train.json").write_text("{}")
    write_synthetic_cityscapes(str(root), 6, 3, 48, 80, seed=3)
    assert len(cityscapes.files(str(root), "train")) == 6
    assert not (root / "leftImg8bit" / "train" / "synth0" / "stray_leftImg8bit.png").exists()
    assert (root / "tfrecords" / "train.json").read_text() == "{}"
