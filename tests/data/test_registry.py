"""Readers found by name (``tfseg.data.registry``): the ones the modules register are the
config's TF-free list, a reader registered anywhere is read through the pipeline, an
unknown name is one line listing the registered ones, and no data set borrows another's
classes."""

import os
import pkgutil
import re
import sys

import numpy as np
import pytest

import tfseg.data
from tfseg.config import DATASETS
from tfseg.data import (READERS, DataConfig, Source, build_dataset, cityscapes, class_names,
                        get_source, palette, png, register_reader)
from tfseg.data.source import index_label_decoder, require_pairs
from tfseg.errors import InputError
from tests.data.trees import save

TINY = "tiny_test_set"
TINY_CLASSES = ("ground", "thing", "sky")


def test_the_modules_register_exactly_the_configs_data_sets():
    """The command line checks --dataset against ``tfseg.config.registry.DATASETS``
    without TensorFlow: a reader missing there, or a name there without a reader, fails."""
    assert list(READERS) and TINY not in READERS
    assert sorted(READERS) == sorted(DATASETS)


def test_every_module_of_the_package_is_imported_so_a_new_reader_registers_itself():
    modules = {m.name for m in pkgutil.iter_modules(tfseg.data.__path__)}
    assert {"registry", "cityscapes", "tfrecords"} <= modules
    assert all(f"tfseg.data.{name}" in sys.modules for name in modules)


@pytest.fixture
def tiny(tmp_path):
    """A throwaway reader of ``root/SPLIT/NAME.png`` + ``NAME_mask.png`` (class ids),
    registered for the test only; (root, masks)."""
    masks = []
    for i in range(3):
        rng = np.random.default_rng(i)
        mask = rng.integers(0, 3, (6, 8)).astype(np.uint8)
        mask[0, 0] = 255
        save(tmp_path / "train" / f"{i}.png", rng.integers(0, 256, (6, 8, 3), dtype=np.uint8))
        save(tmp_path / "train" / f"{i}_mask.png", mask)
        masks.append(mask)

    # No classes=: the registry takes them from the source, not from another data set.
    @register_reader(TINY)
    def source(root, split, missing_ok=False):
        folder = os.path.join(root, split)
        stems = sorted(n[:-4] for n in os.listdir(folder) if not n.endswith("_mask.png"))
        pairs = [(os.path.join(folder, s + ".png"), os.path.join(folder, s + "_mask.png"))
                 for s in require_pairs(stems, folder)]
        return Source(TINY, tuple(pairs), TINY_CLASSES, np.eye(3, dtype=np.uint8) * 255,
                      index_label_decoder({i: i for i in range(3)}), png.is_index_png,
                      "an 8-bit grayscale PNG")

    yield str(tmp_path), masks
    del READERS[TINY]


def test_a_reader_registered_in_its_own_module_is_read_through_the_pipeline(tiny):
    root, masks = tiny
    config = DataConfig(dataset=TINY, root=root, split="train", batch_size=3)
    assert get_source(config).name == TINY
    assert class_names(config) == TINY_CLASSES
    np.testing.assert_array_equal(palette(config), np.eye(3) * 255)
    (_, labels), = [(i.numpy(), l.numpy()) for i, l in build_dataset(config, training=False)]
    np.testing.assert_array_equal(labels, np.stack(masks))
    crops = build_dataset(DataConfig(dataset=TINY, root=root, crop_size=(4, 4), batch_size=2,
                                     seed=1, deterministic=True), training=True, epochs=1)
    (_, label), = [(i.numpy(), l.numpy()) for i, l in crops]
    assert label.shape == (2, 4, 4) and set(np.unique(label)) <= {0, 1, 2, 255}


def test_a_name_registered_twice_is_refused_naming_both(tiny):
    with pytest.raises(ValueError, match=f"two readers registered as '{TINY}'.*test_registry"):
        register_reader(TINY)(cityscapes.source)


def test_an_unknown_data_set_is_one_line_listing_the_registered_ones():
    with pytest.raises(InputError) as error:
        DataConfig(dataset="cityscape")
    message = str(error.value)
    assert "\n" not in message and message.startswith("--dataset: must be one of ")
    assert all(name in message for name in READERS)
    assert message.endswith("got 'cityscape' (did you mean cityscapes?)")


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_no_data_set_falls_back_to_cityscapes_classes(name, tmp_path):
    """Without its files a data set whose classes come from them names the file missing;
    none is given Cityscapes' classes but Cityscapes and its synthetic stand-in."""
    config = DataConfig(dataset=name, root=str(tmp_path / "empty"))
    try:
        names = class_names(config)
    except (InputError, FileNotFoundError) as error:
        assert str(tmp_path) in str(error)
        return
    assert (names == cityscapes.CLASS_NAMES) == (name in ("cityscapes", "synthetic"))
    assert len(palette(config)) == len(names)


def test_a_missing_data_folder_names_the_layout_and_the_docs_section(tmp_path):
    missing = str(tmp_path / "no_such_dir")
    with pytest.raises(InputError) as raised:
        get_source(DataConfig(dataset="cityscapes", root=missing, split="val"))
    assert str(raised.value) == (
        f"--data_dir: {missing} not found; --dataset=cityscapes reads "
        f"leftImg8bit/SPLIT/CITY/*_leftImg8bit.png and gtFine/SPLIT/CITY/*_gtFine_labelIds.png "
        f"(download and layout: docs/datasets.md#cityscapes)")


def test_every_reader_of_files_says_its_layout_and_its_docs_section_exists():
    import pathlib

    docs = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "datasets.md").read_text()
    anchors = {re.sub(r"[^\w\- ]", "", line[3:].strip().lower()).replace(" ", "-")
               for line in docs.splitlines() if line.startswith("## ")}
    for name, reader in READERS.items():
        if name == "synthetic":  # written on first use: never missing
            continue
        assert reader.layout and reader.docs in anchors, name
