"""What each setting accepts: one parser per kind of setting, for both doors.

A setting's kind comes from its field (``names.setting``): an int, float, bool or
string default, a path (``path=True``), or a list (``items=(type, count)``; a size
when ``count`` is set). ``parse`` turns a value of either door into the setting's
value, or says why not:

  * the command's text, as a flag gives it (``"64,64"``, ``"true"``, ``"2000"``): the
    flags (``tfseg.cli.main``) hand their text over unparsed;
  * a Python value (``Config.replace``, ``tfseg.train(...)``, ``Data(...)``): an int for
    an int (not a bool, nor a float with a fraction), any real number for a float, a
    bool (or 0 / 1) for a bool, a str or ``os.PathLike`` for a path, a list or tuple for
    a list (a string is read as the flag's comma list; one number for a size is both
    sides, as ``--crop_size=513`` is).

Each section parses its fields first (``parse_fields``), so that its range rules see
typed values, and raises ``InputError("--FLAG: why")``. config.json is read more
strictly (``saved_type_error``): it holds JSON's own types, as ``Config`` wrote them.
No TensorFlow, no absl.
"""

import csv
import dataclasses
import math
import numbers
import os

from tfseg.config.names import flag_of
from tfseg.errors import InputError

WORDS = {int: "integers", float: "numbers", str: "strings"}


def kind_of(field):
    """"int", "float", "bool", "str", "path", "size" or "list": how ``field`` is parsed."""
    items = field.metadata["items"]
    if items:
        return "size" if items[1] else "list"
    if field.metadata.get("path"):
        return "path"
    if field.metadata.get("aliases"):
        return "choice"
    return type(field.default).__name__


def _int(value):
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and \
            math.isfinite(value) and float(value).is_integer():
        return int(value)
    if isinstance(value, str):
        # absl's integer flag: decimal, or 0x / 0o prefixed.
        base = {"x": 16, "o": 8}.get(value[1], 10) if len(value) > 2 and value[0] == "0" else 10
        try:
            return int(value, base)
        except ValueError:
            pass
    raise ValueError(f"must be an integer, got {value!r}")


def _number(value):
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise ValueError(f"must be a number, got {value!r}")


def _float(value):
    number = _number(value)
    if not math.isfinite(number):
        raise ValueError(f"must be a finite number, got {number}")
    return number


def _bool(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "t", "1", "false", "f", "0"):
        return value.lower() in ("true", "t", "1")  # absl's boolean flag's words
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    raise ValueError(f"must be true or false, got {value!r}")


def _str(value):
    if isinstance(value, str):
        return value
    raise ValueError(f"must be a string, got {value!r}")


def _path(value):
    path = os.fspath(value) if isinstance(value, os.PathLike) else value
    if isinstance(path, str):
        return path
    raise ValueError(f"must be a path (a string or os.PathLike), got {value!r}")


SCALARS = {"int": _int, "float": _float, "bool": _bool, "str": _str, "path": _path}


def split(text):
    """A list flag's text as its items: comma-separated (CSV quoting), each stripped, as
    absl's list flag reads it; "" is no items."""
    if not text:
        return []
    try:
        return [s.strip() for s in next(csv.reader([text], strict=True))]
    except csv.Error as error:
        raise ValueError(f"is not a comma-separated list ({error}): {text!r}") from None


def _items(field, value):
    kind, count = field.metadata["items"]
    what = WORDS[kind]
    if isinstance(value, str):
        values = split(value)
    elif isinstance(value, (list, tuple)):
        values = list(value)
    elif kind is not str and isinstance(value, numbers.Real) and not isinstance(value, bool):
        values = [value]  # one size, or a list of one number
    else:
        raise ValueError(f"must be a list of {what} (A,B or a list or tuple), got {value!r}")
    shown = ",".join(map(str, values))
    element = {int: _int, float: _number, str: _str}[kind]
    try:
        parsed = tuple(element(v) for v in values)
    except ValueError:
        raise ValueError(f"expected {what}, got {shown!r}") from None
    if kind is float and not all(map(math.isfinite, parsed)):
        raise ValueError(f"must be finite numbers, got {shown}")
    if count and len(parsed) == 1:
        parsed *= count
    if count and len(parsed) != count:
        raise ValueError(f"expected {count} values, got {len(parsed)}")
    return parsed


def parse(field, value):
    """``value`` (a flag's text or a Python value) as the setting ``field``'s value.

    Raises:
      ValueError: why not, without the flag's name ("must be an integer, got 2.7").
    """
    kind = kind_of(field)
    if kind == "choice":
        return _choice(field, value)
    return _items(field, value) if kind in ("size", "list") else SCALARS[kind](value)


def _choice(field, value):
    """A str setting that was once a bool: true and false (absl's words, or Python's)
    are its aliases' values; any other text is itself (its section checks the names)."""
    try:
        return field.metadata["aliases"][_bool(value)]
    except ValueError:
        return _str(value)


def parse_fields(section):
    """Parses each field of ``section`` (a config dataclass, frozen) in place.

    Raises:
      InputError: "--FLAG: why", for the first field that cannot be parsed.
    """
    for field in dataclasses.fields(section):
        try:
            value = parse(field, getattr(section, field.name))
        except ValueError as error:
            raise InputError(f"--{flag_of(field)}: {error}") from None
        object.__setattr__(section, field.name, value)


def saved_type_error(field, value):
    """Why ``value``, read from a config.json, cannot be the setting ``field``, or None:
    JSON's own types, as ``Config.to_json`` writes them (no text for a number, a list for
    a list); ``parse`` then reads the value."""
    def number(v, kind):
        if isinstance(v, bool):
            return False
        return isinstance(v, int) or (kind is float and isinstance(v, float))

    items = field.metadata["items"]
    if items:
        kind = items[0]
        ok = isinstance(value, (list, tuple)) and all(
            isinstance(v, str) if kind is str else number(v, kind) for v in value)
        return None if ok else f"must be a list of {WORDS[kind]}, got {value!r}"
    kind = type(field.default)
    if field.metadata.get("aliases"):  # a run saved when the setting was a bool: true
        return None if isinstance(value, (bool, str)) else \
            f"must be a string, or true or false, got {value!r}"
    if kind is bool:
        return None if isinstance(value, bool) else f"must be true or false, got {value!r}"
    if kind in (int, float):
        what = "an integer" if kind is int else "a number"
        return None if number(value, kind) else f"must be {what}, got {value!r}"
    return None if isinstance(value, kind) else f"must be a string, got {value!r}"
