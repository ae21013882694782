"""The export formats: each a module of this package that registers its writer by name.

``--export_format`` is checked against ``tfseg.config.names.EXPORT_FORMATS`` without
TensorFlow; ``tests/deploy/test_registry.py`` fails unless the formats registered here
are exactly those. A new format is one module with ``@register`` and one name there.

Example::

    @register("tflite", entries=("model.tflite",), needs=())
    def write(model, folder, request):
        ...  # writes folder/model.tflite; returns what a client sends and gets

    labelled("tflite", write=write_labels, read=read_labels)  # its classes (labels.py)
"""

import dataclasses
import importlib
import importlib.util
import os
from typing import Callable, Optional, Tuple

from tfseg.deploy import labels
from tfseg.errors import InputError

# What a missing converter's message tells the user to install.
EXTRA = 'pip install "tfseg[export]"'


@dataclasses.dataclass(frozen=True)
class Exporter:
    """One format's writer.

    Attributes:
      name: its ``--export_format`` value.
      entries: the files or folders it writes in the export folder (an --overwrite may
        replace a folder that holds only entries of the formats).
      write: ``write(model, folder, request) -> str``: writes ``entries`` into
        ``folder`` and returns one phrase saying what they take and give.
      needs: modules it imports that the base install lacks (the ``export`` extra).
      accepts: ``accepts(path) -> bool``: is ``path`` a file or folder of this format
        (``predict --model_path``); None for a format predict does not run.
      open: ``open(path) -> classify``, ``classify(uint8 [1, H, W, 3]) -> int32 class
        ids [1, H, W]`` (numpy), at the image's own size.
      open_needs: modules ``open`` imports that the base install lacks.
      write_labels: ``write_labels(path, text)``: stores the JSON text of a
        ``labels.Labels`` in the entry ``path`` this format wrote.
      read_labels: ``read_labels(path) -> text``, None for a file without it.
      fits: ``fits(model, request)``: raises ``InputError`` where this machine could not
        convert ``request`` (its memory: ``tfseg.deploy.fits``); None where any fits.
    """

    name: str
    entries: Tuple[str, ...]
    write: Callable
    needs: Tuple[str, ...] = ()
    accepts: Optional[Callable] = None
    open: Optional[Callable] = None
    open_needs: Tuple[str, ...] = ()
    write_labels: Optional[Callable] = None
    read_labels: Optional[Callable] = None
    fits: Optional[Callable] = None

    def require(self):
        """Refuses in one line, before any work, a format whose converter is missing or
        fails on import (a broken install: an ``onnx`` of a version ``tf2onnx`` cannot
        use)."""
        _require_installed(self.needs, f"--export_format={self.name}")


EXPORTERS = {}


def _missing(modules):
    """The ones of ``modules`` that are not installed."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def _broken(modules):
    """Why the first of ``modules`` that fails on import does, in one line, or None."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as error:  # a broken install raises anything
            first = (str(error).strip().splitlines() or [""])[0][:200]
            return (f"{module} is installed but fails on import ({type(error).__name__}: "
                    f"{first}); reinstall it: {EXTRA}")
    return None


def _require_installed(modules, what):
    """Refuses in one line, starting with ``what``, ``modules`` of which one is not
    installed (the message names the extra to install) or fails on import.

    Raises:
      InputError: "WHAT needs M, which is not installed: pip install ..." or
        "WHAT: M is installed but fails on import (...); reinstall it: ...".
    """
    missing = _missing(modules)
    if missing:
        raise InputError(f"{what} needs {', '.join(missing)}, which is not installed: {EXTRA}")
    broken = _broken(modules)
    if broken:
        raise InputError(f"{what}: {broken}")


def register(name, entries, needs=(), fits=None):
    """Decorator: registers ``write`` as the exporter of format ``name`` (``fits``: see
    ``Exporter``)."""
    def decorate(write):
        EXPORTERS[name] = Exporter(name, tuple(entries), write, tuple(needs), fits=fits)
        return write
    return decorate


def runner(name, accepts, needs=()):
    """Decorator: registers ``open`` as the way ``predict --model_path`` runs a file of
    format ``name`` (registered before), ``accepts(path)`` recognising one."""
    def decorate(open_):
        EXPORTERS[name] = dataclasses.replace(EXPORTERS[name], accepts=accepts, open=open_,
                                              open_needs=tuple(needs))
        return open_
    return decorate


def labelled(name, write, read, accepts=None):
    """Registers how format ``name`` (registered before) stores and reads its classes
    (``write_labels``, ``read_labels`` of ``Exporter``); ``accepts`` for a format that
    predict does not run (its ``runner`` gives it otherwise)."""
    EXPORTERS[name] = dataclasses.replace(EXPORTERS[name], write_labels=write,
                                          read_labels=read,
                                          accepts=accepts or EXPORTERS[name].accepts)


class Labelled:
    """An exported model's ``classify``, and ``labels``: the ``labels.Labels`` its file
    carries (None for one exported before tfseg stored them); ``note``: what the runner
    says of how it runs the file (``classify.note``), None where nothing."""

    def __init__(self, classify, labels_):
        self.classify, self.labels = classify, labels_
        self.note = getattr(classify, "note", None)

    def __call__(self, image):
        return self.classify(image)


def read_labels(path):
    """The ``labels.Labels`` that the exported file or folder ``path`` carries, None for
    one exported before tfseg stored them.

    Raises:
      InputError: ``path`` is missing, of no format, or its labels cannot be read.
    """
    if not os.path.exists(path):
        raise InputError(f"--model_path: no such file or folder: {path}")
    for exporter in EXPORTERS.values():
        if exporter.read_labels and exporter.accepts(path):
            return labels.read_file(exporter, path)
    raise InputError(f"--model_path: {path} is not an exported model")


# What every format predict runs takes and gives (tfseg.deploy.serving's INPUT and
# CLASSES): {name: (dtype, shape)}, None for a side of any size.
TAKES = {"image": ("uint8", (1, None, None, 3))}
GIVES = {"classes": ("int32", (1, None, None))}


def _spelled(tensors, sides="??"):
    """"image: uint8 [1,?,?,3]" of {name: (dtype, shape)}, a side of any size (None) named
    by the next of ``sides`` ("HW": [1,H,W,3])."""
    def dims(shape):
        free = iter(sides)
        return ",".join(next(free, "?") if n is None else str(n) for n in shape)
    return ", ".join(f"{name}: {dtype} [{dims(shape)}]" for name, (dtype, shape)
                     in tensors.items()) or "nothing"


def require_exported(path, takes, gives):
    """Refuses, before any image is run, a model that tfseg did not export: one whose
    inputs ``takes`` are not exactly ``TAKES`` or whose outputs ``gives`` lack ``GIVES``
    (each {name: (dtype name, shape)}, None for a side of any size; a fixed size fits
    ``TAKES``' any). A foreign model (its input ``x``, float32) failed at the first image
    with the runtime's traceback.

    Raises:
      InputError: one line naming the file, what it takes and gives, and what tfseg's
        exports do.
    """
    def fits(found, wanted):
        (dtype, shape), (want_dtype, want_shape) = found, wanted
        return dtype == want_dtype and len(shape) == len(want_shape) and all(
            n is None or w is None or n == w for n, w in zip(shape, want_shape))

    if (set(takes) == set(TAKES) and all(fits(takes[n], TAKES[n]) for n in TAKES)
            and all(n in gives and fits(gives[n], GIVES[n]) for n in GIVES)):
        return
    raise InputError(f"--model_path: {path} is not a model tfseg exported: it takes "
                     f"{_spelled(takes)} and gives {_spelled(gives)}; predict runs tfseg's "
                     f"exports, which take {_spelled(TAKES, 'HW')} and give "
                     f"{_spelled(GIVES, 'HW')} (docs/export.md)")


def open_model(path):
    """``classify(uint8 [1, H, W, 3]) -> int32 [1, H, W]`` of the exported model at
    ``path``, a ``Labelled``: with the classes the file carries.

    Raises:
      InputError: ``path`` is missing, of no format predict runs, needs a missing
        runtime (names the extra), or cannot be read by its runtime (one line).
    """
    if not os.path.exists(path):
        raise InputError(f"--model_path: no such file or folder: {path}")
    runs = [e for e in EXPORTERS.values() if e.open is not None]
    for exporter in runs:
        if exporter.accepts(path):
            _require_installed(exporter.open_needs, f"--model_path: running {path}")
            try:
                classify = exporter.open(path)
            except InputError:
                raise  # the format's own check, already one line naming the file
            except Exception as error:  # each runtime raises its own types
                first = (str(error).strip().splitlines() or [repr(error)])[0]
                raise InputError(f"--model_path: {path} could not be read as "
                                 f"{exporter.name}: {first[:300]}") from None
            return Labelled(classify, labels.read_file(exporter, path))
    raise InputError(f"--model_path: {path} is not an exported model predict runs: "
                     f"{', '.join(e.name for e in runs)} (docs/export.md)")


def all_entries():
    """Every name an export folder may hold: the formats' entries. Nothing else: predict's
    default folder is beside the export folder (``tfseg.evaluation.exported``), and an
    --overwrite export refuses a folder that holds predictions (it would delete them)."""
    return {entry for exporter in EXPORTERS.values() for entry in exporter.entries}
