"""The export formats: each a module of this package that registers its writer by name.

``--export_format`` is checked against ``tfseg.config.names.EXPORT_FORMATS`` without
TensorFlow; ``tests/deploy/test_registry.py`` fails unless the formats registered here
are exactly those. A new format is one module with ``@register`` and one name there.

Example::

    @register("tflite", entries=("model.tflite",), needs=())
    def write(model, folder, request):
        ...  # writes folder/model.tflite; returns what a client sends and gets
"""

import dataclasses
import importlib.util
from typing import Callable, Tuple

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
    """

    name: str
    entries: Tuple[str, ...]
    write: Callable
    needs: Tuple[str, ...] = ()

    def require(self):
        """Refuses in one line, before any work, a format whose converter is missing."""
        missing = [m for m in self.needs if importlib.util.find_spec(m) is None]
        if missing:
            raise InputError(f"--export_format={self.name} needs {', '.join(missing)}, "
                             f"which is not installed: {EXTRA}")


EXPORTERS = {}


def register(name, entries, needs=()):
    """Decorator: registers ``write`` as the exporter of format ``name``."""
    def decorate(write):
        EXPORTERS[name] = Exporter(name, tuple(entries), write, tuple(needs))
        return write
    return decorate


def all_entries():
    """Every name an export folder may hold."""
    return {entry for exporter in EXPORTERS.values() for entry in exporter.entries}
