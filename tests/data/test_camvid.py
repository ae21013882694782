import numpy as np
import pytest

from tfseg.data import DataStats, camvid, pairs_dataset, pairs_to_examples
from tfseg.errors import InputError
from tests.data.trees import save

CSV = "name,r,g,b\n Sky , 128, 128, 128\nRoad,128,64,128\n Car,64,0,128 \nVoid,0,0,0\n"


def _tree(root):
    (root / "class_dict.csv").write_text(CSV)
    colours = np.array([(128, 128, 128), (128, 64, 128), (64, 0, 128), (0, 0, 0),
                        (128, 64, 0),        # matches Road in 2 of 3 channels: unknown
                        (1, 2, 3)], np.uint8)  # unknown
    index = np.arange(6 * 8).reshape(6, 8) % len(colours)
    save(root / "train" / "0001TP_006690.png", np.zeros((6, 8, 3), np.uint8))
    save(root / "train_labels" / "0001TP_006690_L.png", colours[index])
    return np.array([0, 1, 2, 255, 255, 255])[index]


def test_class_dict_strips_spaces_and_treats_void_as_ignore(tmp_path):
    _tree(tmp_path)
    names, colours, ignored = camvid.read_class_dict(str(tmp_path / "class_dict.csv"))
    assert names == ("Sky", "Road", "Car")
    assert colours.tolist() == [[128, 128, 128], [128, 64, 128], [64, 0, 128]]
    assert ignored.tolist() == [[0, 0, 0]]


def test_colour_labels_need_all_three_channels(tmp_path):
    expected = _tree(tmp_path)
    source = camvid.source(str(tmp_path), "train")
    assert source.num_classes == 3
    stats = DataStats()
    (_, label), = pairs_to_examples(pairs_dataset(source.pairs), source, stats=stats)
    np.testing.assert_array_equal(label.numpy(), expected)
    # The partial match and the unknown colour count; Void is a known ignore colour.
    assert stats.as_dict()["unknown_label_pixels"] == 2 * 48 // 6


def test_class_dict_with_utf8_byte_order_mark(tmp_path):
    """As Excel's "CSV UTF-8" writes it: the BOM must not end up in the header."""
    expected = _tree(tmp_path)
    (tmp_path / "class_dict.csv").write_bytes(CSV.replace("\n", "\r\n").encode("utf-8-sig"))
    assert (tmp_path / "class_dict.csv").read_bytes().startswith(b"\xef\xbb\xbfname,")
    names, _, _ = camvid.read_class_dict(str(tmp_path / "class_dict.csv"))
    assert names == ("Sky", "Road", "Car")
    source = camvid.source(str(tmp_path), "train")
    (_, label), = pairs_to_examples(pairs_dataset(source.pairs), source)
    np.testing.assert_array_equal(label.numpy(), expected)


def test_bad_class_dict_is_named(tmp_path):
    (tmp_path / "class_dict.csv").write_text("name,r,g,b\na,1,2,3\nb,1,2,3\n")
    with pytest.raises(InputError, match="class_dict.csv"):
        camvid.read_class_dict(str(tmp_path / "class_dict.csv"))
    (tmp_path / "class_dict.csv").write_text("name,r,g,b\na,1,2\n")
    with pytest.raises(InputError, match="class_dict.csv"):
        camvid.read_class_dict(str(tmp_path / "class_dict.csv"))


def test_empty_split_is_named(tmp_path):
    (tmp_path / "val").mkdir()
    (tmp_path / "val_labels").mkdir()
    with pytest.raises(InputError, match=str(tmp_path / "val")):
        camvid.files(str(tmp_path), "val")


def test_missing_label_folder_is_named(tmp_path):
    save(tmp_path / "val" / "a.png", np.zeros((4, 4, 3), np.uint8))
    with pytest.raises(FileNotFoundError, match="val_labels"):
        camvid.files(str(tmp_path), "val")
