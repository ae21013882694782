"""The recipes: one flagfile per tested configuration (``NAME.flags`` in this folder), shipped
with the package, so that an installed ``tfseg`` has them too; ``flags/`` in a checkout is
a link to this folder.

A recipe is a flagfile: a first comment line that says what it is (``--mode=recipes``
lists it), comments on how to run it and what to expect, then one ``--flag=value`` a line.
``tfseg --recipe=NAME`` reads it where ``--recipe`` stands, as ``--flagfile=`` would, so a
flag given after it wins; ``--recipe=NAME`` may also stand in a flagfile (one recipe
starting from another, or a user's file from a recipe). No TensorFlow.

Example:
    from tfseg import recipes
    print(recipes.names())               # ['camvid', 'cityscapes_xception65_os16_crop769', ...]
    print(recipes.path("camvid"))        # .../tfseg/recipes/camvid.flags
    print(recipes.expand(["prog", "--recipe=camvid", "--batch_size=2"], lambda a: a))
    # ['prog', '--flagfile=.../tfseg/recipes/camvid.flags', '--batch_size=2']
"""

import os

from tfseg.config.names import one_of
from tfseg.errors import InputError

FOLDER = os.path.dirname(os.path.abspath(__file__))
SUFFIX = ".flags"
FLAG = "--recipe"
# Recipes read from recipes, deeper than this: one that includes itself.
MAX_DEPTH = 8


def names():
    """The recipes' names (their files' names without ``.flags``), sorted."""
    return sorted(f[:-len(SUFFIX)] for f in os.listdir(FOLDER) if f.endswith(SUFFIX))


def path(name):
    """The flagfile of recipe ``name``.

    Raises:
      InputError: "--recipe: must be one of camvid, ..., got 'x' (did you mean ...?)",
        one line.
    """
    one_of(name, names(), FLAG[2:])
    return os.path.join(FOLDER, name + SUFFIX)


def description(name):
    """The first line of recipe ``name``'s leading comment, without the ``#``."""
    with open(path(name)) as f:
        first = f.readline()
    return first.lstrip("#").strip() if first.startswith("#") else ""


def table():
    """One line per recipe: its name, padded, then its description (``--mode=recipes``)."""
    width = max(map(len, names())) + 2
    return "\n".join(f"{name:<{width}}{description(name)}" for name in names())


def _as_flagfiles(args):
    """``args`` with each ``--recipe=NAME`` (or ``-recipe=NAME``, ``--recipe NAME`` as one
    argument or two, as a flagfile's line or the command line gives it) as
    ``--flagfile=PATH``, up to a ``--`` (after it, as absl reads them, arguments are not
    flags); whether there was one."""
    out, found, rest = [], False, list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            out += [arg, *rest]
            break
        name = _recipe_name(arg)
        if name == "":
            if not rest:
                raise InputError(f"{FLAG}: needs a name ({FLAG}=NAME): one of "
                                 f"{', '.join(names())}")
            name = rest.pop(0)
        if name is None:
            out.append(arg)
        else:
            out.append(f"--flagfile={path(name.strip())}")
            found = True
    return out, found


def _recipe_name(arg):
    """The NAME of a ``--recipe`` argument; "" for the flag alone (its name follows); None
    for any other argument."""
    for flag in (FLAG, FLAG[1:]):
        if arg == flag:
            return ""
        for separator in ("=", " "):
            if arg.startswith(flag + separator):
                return arg[len(flag) + 1:]
    return None


def expand(argv, read_flagfiles):
    """``argv`` (program name first) with each ``--recipe=NAME`` replaced by its recipe's
    flags, in its place, in flagfiles too.

    Args:
      argv: the command line, ``sys.argv``'s form.
      read_flagfiles: the command's flag reader (absl's ``read_flags_from_files``): the
        arguments (without the program name) with each ``--flagfile=`` replaced by its
        file's flags.

    Raises:
      InputError: an unknown recipe (one line listing the recipes), or recipes that
        include each other.
    """
    args, _ = _as_flagfiles(argv[1:])
    for _ in range(MAX_DEPTH):
        # A --recipe read from a file (a user's, or a recipe) is expanded in turn.
        args, found = _as_flagfiles(read_flagfiles(args))
        if not found:
            return argv[:1] + args
    raise InputError(f"{FLAG}: recipes read from recipes more than {MAX_DEPTH} deep: one "
                     f"includes itself")
