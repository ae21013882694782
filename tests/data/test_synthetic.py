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


# Each layout a reader registers, as the few entries a user's copy of it starts with.
LAYOUTS = {
    "cityscapes": ("leftImg8bit/train/aachen/a_leftImg8bit.png", "gtFine/train/aachen/x.png"),
    "voc": ("JPEGImages/2007_000032.jpg", "SegmentationClass/2007_000032.png"),
    "camvid": ("class_dict.csv", "train/0001TP_006690.png"),
    "ade20k": ("images/training/a.jpg", "annotations/training/a.png"),
    "folder": ("classes.txt", "train/images/a.jpg", "train/masks/a.png"),
}


def _user_files(root, relative):
    files = {}
    for i, name in enumerate(relative):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"the user's %d" % i)
        files[path] = path.read_bytes()
    return files


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_data_set_in_the_folder_is_refused_naming_its_layout_and_kept(tmp_path, layout):
    """--dataset left at synthetic with --data_dir on the user's data set: refused in one
    line that names the folder and the --dataset that reads it; every file stays."""
    root = tmp_path / "mydata"
    files = _user_files(root, LAYOUTS[layout])
    with pytest.raises(InputError) as error:
        write_synthetic_cityscapes(str(root), 6, 3, 48, 80, seed=3)
    message = str(error.value)
    assert message.startswith(f"--data_dir: {root} holds ") and "\n" not in message
    assert f"it looks like a {layout} data set: pass --dataset={layout}" in message
    assert {p: p.read_bytes() for p in files} == files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mydata"]  # no staging left


def test_a_folder_of_other_files_is_refused_and_kept(tmp_path):
    root = tmp_path / "photos"
    files = _user_files(root, ("holiday.jpg", "notes/a.txt"))
    with pytest.raises(InputError, match=r"holds holiday.jpg, notes and no synthetic set.*"
                                         r"pass --dataset=NAME"):
        write_synthetic_cityscapes(str(root), 6, 3, 48, 80, seed=3)
    assert {p: p.read_bytes() for p in files} == files


def test_an_empty_folder_takes_the_set_and_a_file_is_refused(tmp_path, synthetic_root):
    root = tmp_path / "empty"
    root.mkdir()
    write_synthetic_cityscapes(str(root), 6, 3, 48, 80, seed=3)
    assert len(cityscapes.files(str(root), "train")) == 6
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InputError, match="is a file, not a folder"):
        write_synthetic_cityscapes(str(tmp_path / "afile"), 6, 3, 48, 80, seed=3)
    assert (tmp_path / "afile").read_text() == "x"


def test_files_that_appear_while_the_set_is_written_are_kept(tmp_path, monkeypatch):
    """Another program fills the folder between the check and the rename: refused."""
    root = tmp_path / "racy"
    real = synthetic._write

    def write_then_user_arrives(staging, params):
        real(staging, params)
        _user_files(root, LAYOUTS["cityscapes"])

    monkeypatch.setattr(synthetic, "_write", write_then_user_arrives)
    with pytest.raises(InputError, match="pass --dataset=cityscapes"):
        write_synthetic_cityscapes(str(root), 6, 3, 48, 80, seed=3)
    assert sorted(os.listdir(root)) == ["gtFine", "leftImg8bit"]
    assert (root / LAYOUTS["cityscapes"][0]).read_bytes() == b"the user's 0"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["racy"]


def test_a_refused_folder_is_not_announced_as_being_written(tmp_path, capsys):
    """`tfseg --dataset=synthetic --data_dir=FOLDER`: the refusal comes alone, not after a
    line saying that the set is being written there."""
    root = tmp_path / "photos"
    _user_files(root, ("holiday.jpg",))
    with pytest.raises(InputError, match="no synthetic set"):
        synthetic.source(str(root), "train")
    assert capsys.readouterr().out == ""
