"""The folders a write makes on its way to its files, and their removal when the write
fails: a refused or failed run leaves no empty folder of its own behind, and never
removes one it did not make. No TensorFlow."""

import os


def missing(path):
    """The folders from ``path`` up that do not exist yet, deepest first: what
    ``os.makedirs(path)`` would make.

    Example:
        made = missing("runs/new/a")     # ["/abs/runs/new/a", "/abs/runs/new"]
        os.makedirs("runs/new/a")
        remove_empty(made)               # both gone again: they hold nothing
    """
    made, folder = [], os.path.abspath(path)
    while not os.path.lexists(folder) and os.path.dirname(folder) != folder:
        made.append(folder)
        folder = os.path.dirname(folder)
    return made


def remove_empty(made):
    """Removes the folders of ``made`` (``missing``'s list, taken before they were made)
    deepest first, up to the first that holds anything (or is gone)."""
    for folder in made:
        try:
            os.rmdir(folder)
        except OSError:
            return
