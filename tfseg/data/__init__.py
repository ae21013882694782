"""tfseg input pipelines: data set readers, transformations and tf.data builders.

Every module of this package is imported here, so that each reader registers itself
(``register_reader``): a new data set is its own module, listed nowhere else on this
side; ``tfseg.data.registry`` says more.
"""

import importlib
import pkgutil

from tfseg.config import DATASETS
from tfseg.data import (ade20k, camvid, cityscapes, folder, order, png, synthetic, transforms,
                        voc)
from tfseg.data.config import DataConfig
from tfseg.data.decode import load_pair
from tfseg.data.pairs import pairs_dataset, pairs_to_examples
from tfseg.data.feed import as_fit_pairs, distribute, iterate
from tfseg.data.pipeline import (build_dataset, build_dataset_with_stats,
                                 class_names, get_source, palette)
from tfseg.data.registry import READERS, Reader, reader, register_reader
from tfseg.data.source import IGNORE_LABEL, Source
from tfseg.data.stats import DataStats
from tfseg.data.synthetic import write_synthetic_cityscapes
from tfseg.data.tfrecords import read_tfrecords, write_tfrecords

# The modules not imported above (a new reader), in name order: each registers itself.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "DATASETS",
    "DataConfig",
    "DataStats",
    "IGNORE_LABEL",
    "READERS",
    "Reader",
    "Source",
    "ade20k",
    "as_fit_pairs",
    "build_dataset",
    "build_dataset_with_stats",
    "camvid",
    "class_names",
    "palette",
    "cityscapes",
    "distribute",
    "folder",
    "get_source",
    "iterate",
    "load_pair",
    "order",
    "pairs_dataset",
    "pairs_to_examples",
    "png",
    "read_tfrecords",
    "reader",
    "register_reader",
    "synthetic",
    "transforms",
    "voc",
    "write_synthetic_cityscapes",
    "write_tfrecords",
]
