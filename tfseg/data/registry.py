"""Data set readers, found by name: each reader module registers itself.

A reader is a function ``source(root, split, missing_ok=False)`` returning a
``tfseg.data.Source``, decorated where it is defined::

    @register_reader("voc", classes=(CLASS_NAMES, PALETTE))
    def source(root, split, missing_ok=False):
        ...

``tfseg.data`` imports every module of its package, so a new reader module is found
without being listed anywhere on this side. The command line checks ``--dataset``
without TensorFlow, against ``tfseg.config.registry.DATASETS``; ``DataConfig`` checks
it against the readers registered here, so a library user can register a reader of
their own in their own module.
"""

import dataclasses
import os
from typing import Callable, Optional

from tfseg.config.names import one_of
from tfseg.errors import InputError

# name -> Reader, in the order the modules registered them.
READERS = {}


@dataclasses.dataclass(frozen=True)
class Reader:
    """One registered data set.

    Attributes:
      name: its ``--dataset`` / ``DataConfig.dataset`` name.
      source: ``source(root, split, missing_ok=False)`` -> ``Source``.
      classes: ``classes(root, split)`` -> (class names, palette uint8 [N, 3]), read
        without listing or decoding images, so that a run can be planned before the
        data set is on disk; None: those of ``source(root, split)``.
      records: the examples are TFRecord shards of ``tfseg.data.write_tfrecords``
        (``source`` gives no pairs), read by ``tfseg.data.tfrecords``, not image files.
      layout: what ROOT holds, in a few words, for the message when it is missing.
      docs: the anchor of its section in docs/datasets.md (download and layout).
      marks: entries of ROOT that together tell its layout (``("leftImg8bit", "gtFine")``),
        so that a folder of this data set is recognised (``looks_like``).
    """

    name: str
    source: Callable
    classes: Optional[Callable] = None
    records: bool = False
    layout: str = ""
    docs: str = ""
    marks: tuple = ()

    def require_root(self, root):
        """``InputError`` of one line when the data folder ``root`` is missing: the
        folder, the layout the reader expects, and where to read how to get it."""
        if self.layout and not os.path.isdir(root):
            raise InputError(f"--data_dir: {root} not found; --dataset={self.name} reads "
                             f"{self.layout} (download and layout: docs/datasets.md"
                             f"#{self.docs})")

    def class_info(self, root, split):
        """(class names tuple, palette) of the split, e.g. ``reader("voc").class_info(
        "data/VOC2012", "val")[0][:2] == ("background", "aeroplane")``."""
        if self.classes is None:
            found = self.source(root, split)
            return tuple(found.class_names), found.palette
        names, palette = self.classes(root, split)
        return tuple(names), palette


def register_reader(name, classes=None, records=False, layout="", docs="", marks=()):
    """A decorator that registers ``source(root, split, missing_ok=False)`` as the reader
    of data set ``name``, and returns it unchanged.

    Args:
      name: the data set's name; registering a name twice is a ValueError (two modules
        would silently compete for it).
      classes: ``classes(root, split)`` -> (names, palette) without the images, or the
        constant (names, palette) of a fixed class list; None: ``source``'s (which may
        list the files). ``Reader`` says more.
      records, layout, docs, marks: see ``Reader``.

    Example::

        @register_reader("cityscapes", classes=(CLASS_NAMES, PALETTE))
        def source(root, split, missing_ok=False):
            return Source(...)
    """
    if isinstance(classes, tuple):
        classes = _fixed(classes)

    def register(source):
        if name in READERS:
            raise ValueError(f"two readers registered as {name!r}: "
                             f"{_where(READERS[name].source)} and {_where(source)}")
        READERS[name] = Reader(name, source, classes, records, layout, docs, tuple(marks))
        return source

    return register


def reader(name):
    """The ``Reader`` registered as ``name``; else an ``InputError`` of one line that
    lists the registered names, e.g. ``reader("voc").source("data/VOC2012", "val")``."""
    one_of(name, sorted(READERS), "dataset")
    return READERS[name]


def looks_like(root):
    """The names of the readers whose ``marks`` are all in the folder ``root``, e.g.
    ``["cityscapes"]`` for one holding leftImg8bit/ and gtFine/."""
    return [r.name for r in READERS.values()
            if r.marks and all(os.path.lexists(os.path.join(root, m)) for m in r.marks)]


def _fixed(classes):
    """``classes(root, split)`` of a data set whose classes do not depend on its files."""
    return lambda root, split: classes


def _where(function):
    return f"{function.__module__}.{function.__qualname__}"
