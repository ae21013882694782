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

import codecs
import io
import os

from tfseg.config.names import one_of
from tfseg.errors import InputError

FOLDER = os.path.dirname(os.path.abspath(__file__))
SUFFIX = ".flags"
FLAG = "--recipe"
FLAGFILE = "--flagfile"
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
    first = (text(path(name)).splitlines() or [""])[0]
    return first.lstrip("#").strip() if first.startswith("#") else ""


def table():
    """One line per recipe: its name, padded, then its description (``--mode=recipes``);
    a recipe that cannot be read, its name and what is wrong, so that the others are
    still listed."""
    width = max(map(len, names())) + 2
    return "\n".join(f"{name:<{width}}{_listed(name)}" for name in names())


def _listed(name):
    try:
        return description(name)
    except NotText as error:
        return f"(damaged: {error.reason}; --recipe={name} cannot be read)"
    except OSError as error:
        return f"(damaged: {error.strerror or error}; --recipe={name} cannot be read)"


class NotText(InputError):
    """A flagfile that is not UTF-8 text: the message names the file and the line;
    ``reason`` says what is wrong without the file."""

    def __init__(self, path, reason):
        super().__init__(f"{path}: {reason}; save it as UTF-8")
        self.reason = reason


def text(path):
    """The text of flagfile ``path``, read as UTF-8 whatever the locale (a byte-order mark
    at its start, which some editors write, read as nothing).

    Raises:
      NotText: "FILE: line 3 is not UTF-8 (byte 0xe9 after '# caf'); save it as UTF-8".
      OSError: the file cannot be read.
    """
    with open(path, "rb") as f:
        data = f.read().removeprefix(codecs.BOM_UTF8)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        before = data[data.rfind(b"\n", 0, error.start) + 1:error.start]
        before = before.decode("utf-8", "replace")[-24:]
        where = f"after {before!r}" if before else "at its start"
        raise NotText(path, f"line {line} is not UTF-8 (byte 0x{data[error.start]:02x} "
                            f"{where})") from None


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
        if name is _FOLLOWS and rest:
            name = rest.pop(0)
        if name is None:
            out.append(arg)
            continue
        if name is _FOLLOWS or not name.strip():
            # "--recipe=" took the next argument for its name (the last, or a flag).
            raise InputError(f"{FLAG}: needs a name ({FLAG}=NAME): one of "
                             f"{', '.join(names())}")
        out.append(f"{FLAGFILE}={path(name.strip())}")
        found = True
    return out, found


# The name of a "--recipe" given alone: the next argument.
_FOLLOWS = object()


def _recipe_name(arg):
    """The NAME of a ``--recipe`` argument ("" for ``--recipe=``); ``_FOLLOWS`` for the
    flag alone; None for any other argument."""
    for flag in (FLAG, FLAG[1:]):
        if arg == flag:
            return _FOLLOWS
        for separator in ("=", " "):
            if arg.startswith(flag + separator):
                return arg[len(flag) + 1:]
    return None


def read_flagfiles(args):
    """``args`` with each ``--flagfile=FILE`` (``-flagfile=FILE``, or either alone with
    FILE next) replaced by the file's flags, up to a ``--``: absl's
    ``read_flags_from_files``, its files read by ``text``. In a file, blank lines and
    those starting with ``#`` or ``//`` are comments, a ``--flagfile=`` line reads that
    file in its place, and each other line is one argument, stripped.

    Raises:
      InputError: a file that cannot be read, is not UTF-8 or reads itself; a
        ``--flagfile`` without a file: one line.
    """
    out, rest = [], list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            return out + [arg, *rest]
        if arg in (FLAGFILE, FLAGFILE[1:]):
            arg = f"{FLAGFILE}={rest.pop(0) if rest else ''}"
        out += _file_flags(arg, ()) if _is_flagfile(arg) else [arg]
    return out


def _is_flagfile(arg):
    return arg.startswith((FLAGFILE + "=", FLAGFILE[1:] + "="))


def _file_flags(arg, reading):
    """The flags of the file that ``--flagfile=FILE`` names; ``reading``: the files being
    read (their real paths), which include it."""
    name = os.path.expanduser(arg.split("=", 1)[1].strip())
    if not name:
        raise InputError(f"{FLAGFILE}: needs a file ({FLAGFILE}=FILE)")
    if os.path.realpath(name) in reading:
        # absl warned and went on without the file's flags.
        raise InputError(f"{FLAGFILE}: {name} reads itself; remove its {FLAGFILE} line")
    try:
        lines = io.StringIO(text(name), newline=None)  # \r\n and \r end lines, as in absl
    except OSError as error:
        raise InputError(f"{FLAGFILE}: cannot read {name}: {error.strerror or error}") \
            from None
    out, reading = [], (*reading, os.path.realpath(name))
    for line in map(str.strip, lines):
        if not line or line.startswith(("#", "//")):
            continue
        if line in (FLAGFILE, FLAGFILE[1:]):
            raise InputError(f"{name}: a {FLAGFILE} line without a file ({FLAGFILE}=FILE)")
        out += _file_flags(line, reading) if _is_flagfile(line) else [line]
    return out


def expand(argv, read_flagfiles):
    """``argv`` (program name first) with each ``--recipe=NAME`` replaced by its recipe's
    flags, in its place, in flagfiles too.

    Args:
      argv: the command line, ``sys.argv``'s form.
      read_flagfiles: the command's flag reader (``read_flagfiles``): the arguments
        (without the program name) with each ``--flagfile=`` replaced by its file's flags.

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


def given_by(argv, names):
    """{flag name: recipe name} for each setting in ``names`` whose value ``argv`` (program
    name first) takes from a recipe: the last line that sets it is that recipe's (a flag
    after it, on the command line or in a flagfile, wins). Call it once ``expand`` has
    read ``argv``: recipes that include each other are refused there, not here.

    Example:
        given_by(["tfseg", "--recipe=camvid", "--batch_size=2"], {"batch_size", "dataset"})
        # {'dataset': 'camvid'}
    """
    found = {}
    _given_in(argv[1:], None, set(names), found)
    return {name: recipe for name, recipe in found.items() if recipe}


def _given_in(args, recipe, names, found):
    """Sets ``found[name]`` to ``recipe`` (None: not a recipe) for each setting that
    ``args`` sets, in order, the recipes among them by their own names."""
    rest = read_flagfiles(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            return
        name = _recipe_name(arg)
        if name is _FOLLOWS and rest:
            name = rest.pop(0)
        if isinstance(name, str):
            _given_in([f"{FLAGFILE}={path(name.strip())}"], name.strip(), names, found)
            continue
        flag = arg.lstrip("-").split("=", 1)[0]
        if flag not in names and "=" not in arg and flag.startswith("no"):
            flag = flag[2:]  # --noNAME
        if flag in names:
            found[flag] = recipe
