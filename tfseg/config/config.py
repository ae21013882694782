"""``Config``: the five sections in one value; flags by name (``flag_table``)."""

import dataclasses
import difflib
import json
import re

from tfseg.config.names import (DATASETS, FIXED_ON_RESUME, SAME_VARIABLES, check, crop_ok,
                                flag_of)
from tfseg.config.sections import SECTIONS, Data, Eval, Model, Optim, Run
from tfseg.config.values import parse, saved_type_error
from tfseg.errors import InputError


def flag_table():
    """{flag name: (section name, dataclasses.Field)} for every setting, in section order."""
    table = {}
    for section, cls in SECTIONS.items():
        for field in dataclasses.fields(cls):
            table[flag_of(field)] = (section, field)
    return table


def flag_value(value):
    """``value`` as a flag gives it: a list as "A,B", a bool as "true", '' as "''"."""
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    if isinstance(value, bool):
        return str(value).lower()
    return str(value) if value != "" else "''"


def _unaliased(field, value):
    """A saved value as the setting reads it now, where the setting was once a bool (a
    config.json's true for --jit_compile is "step"): compared with a run's, it is equal."""
    if not field.metadata.get("aliases") or not isinstance(value, bool):
        return value
    return parse(field, value)


# A section not given to ``Config(...)``: its defaults.
_DEFAULT = object()


@dataclasses.dataclass(frozen=True)
class Config:
    """One run: ``data``, ``model``, ``optim``, ``eval`` and ``run`` sections (see each).

    ``Config(crop_size=(65, 65), train_steps=100)`` takes settings by flag name too, as
    ``Config.from_flat`` does: each parsed and checked as its flag is (an ``InputError``
    naming the flag), a name that is no setting a ``TypeError``.
    """

    data: Data = dataclasses.field(default_factory=Data)
    model: Model = dataclasses.field(default_factory=Model)
    optim: Optim = dataclasses.field(default_factory=Optim)
    eval: Eval = dataclasses.field(default_factory=Eval)
    run: Run = dataclasses.field(default_factory=Run)

    def __init__(self, data=_DEFAULT, model=_DEFAULT, optim=_DEFAULT, eval=_DEFAULT,
                 run=_DEFAULT, **settings):
        # The dataclass's own __init__ (which this replaces: dataclasses keeps a class's
        # __init__) took the sections only, and a setting by flag name was a TypeError
        # ("unexpected keyword argument 'crop_size'") that skipped every check.
        given = dict(data=data, model=model, optim=optim, eval=eval, run=run)
        for section, cls in SECTIONS.items():
            value = given[section]
            object.__setattr__(self, section, cls() if value is _DEFAULT else value)
        if settings:
            self._check_sections()
            for section, value in self._sections(settings).items():
                object.__setattr__(self, section, value)
        self.__post_init__()

    def _check_sections(self):
        for section, cls in SECTIONS.items():
            value = getattr(self, section)
            if not isinstance(value, cls):
                raise InputError(f"Config: {section} must be a tfseg.config.{cls.__name__}, got "
                                 f"{type(value).__name__}; settings by flag name go to "
                                 f"Config.from_flat(...) or config.replace(...)")

    def __post_init__(self):
        self._check_sections()
        check(all(crop_ok(s, self.model.output_stride) for s in self.data.crop_size),
              "crop_size", f"{'x'.join(map(str, self.data.crop_size))} does not fit output "
              f"stride {self.model.output_stride}: each side must be a multiple of it or one "
              f"more (e.g. 513, 769, 1024)")
        check(not (self.run.eval_every and (self.model.class_shards or self.run.class_devices)),
              "eval_every", "evaluates the training model's full logits, which the many-class "
              "head (--class_shards, --class_devices) never makes; evaluate with --mode=eval "
              "(the stock head, the same weights) instead")
        check(self.run.mode != "convert" or self.data.dataset != "tfrecord", "dataset",
              f"convert reads an image data set "
              f"({', '.join(d for d in DATASETS if d != 'tfrecord')}), not tfrecord")

    def replace(self, **flat):
        """A copy with settings changed, by flag name (``replace(crop_size=(65, 65))``)."""
        return dataclasses.replace(self, **self._sections(flat))

    def _sections(self, flat):
        """{section name: the section with the settings of ``flat`` (by flag name)} for
        each section they change, each section's own checks run."""
        table, changes = flag_table(), {}
        for flag, value in flat.items():
            if flag not in table:
                close = difflib.get_close_matches(flag, list(table), n=1)
                raise TypeError(f"no setting {flag!r}"
                                + (f" (did you mean {close[0]}?)" if close else ""))
            section, field = table[flag]
            changes.setdefault(section, {})[field.name] = value
        return {section: dataclasses.replace(getattr(self, section), **values)
                for section, values in changes.items()}

    @classmethod
    def from_flat(cls, **flat):
        """The default config with settings given by flag name."""
        return cls().replace(**flat)

    @classmethod
    def from_flags(cls, values):
        """From {flag name: value} as the command's flags give them: the text typed (or the
        default), parsed as a Python value would be (``tfseg.config.values``)."""
        return cls.from_flat(**values)

    def flat(self):
        """{flag name: value} of every setting."""
        return {flag: getattr(getattr(self, section), field.name)
                for flag, (section, field) in flag_table().items()}

    @staticmethod
    def settings_of(saved):
        """{flag name: value} of the settings in a saved config dict (``to_dict()``'s
        nested form, or the flat one of runs saved before the sections), lists as
        tuples; other keys (a run's class names, palette) are left out."""
        by_field = {(section, field.name): flag
                    for flag, (section, field) in flag_table().items()}
        flat = {}
        for key, value in saved.items():
            if key in SECTIONS and isinstance(value, dict):
                flat.update({by_field[key, k]: v for k, v in value.items()
                             if (key, k) in by_field})
            elif key in by_field.values():
                flat[key] = value
        table = flag_table()
        return {k: tuple(v) if isinstance(v, list) else _unaliased(table[k][1], v)
                for k, v in flat.items()}

    @classmethod
    def check_saved(cls, saved, source, extras=()):
        """The ``Config`` a saved dict describes, every entry checked: its type, that it is
        a setting (in ``to_dict()``'s nested form or the flat one of older runs) or one of
        ``extras``, and the settings' own rules (the sections' and ``Config``'s).

        Raises:
          InputError: "SOURCE: FIELD: why", one line naming the file (``source``) and the
            field ("model.width_multiplier").
        """
        def refuse(field, why):
            raise InputError(f"{source}: {field}: {why}")

        if not isinstance(saved, dict):
            raise InputError(f"{source}: not a JSON object of settings (a "
                             f"{type(saved).__name__})")
        table, flat, field_of = flag_table(), {}, {}
        by_field = {(section, field.name): flag for flag, (section, field) in table.items()}
        for flag, (section, field) in table.items():
            field_of[flag] = f"{section}.{field.name}"
        for key, value in saved.items():
            if key in SECTIONS:
                if not isinstance(value, dict):
                    refuse(key, f"must be an object of settings, got {value!r}")
                entries = {}
                for name, item in value.items():
                    if (key, name) not in by_field:
                        refuse(f"{key}.{name}", "unknown field: not a setting of this tfseg")
                    entries[by_field[key, name]] = item
            elif key in table:  # the flat form
                entries = {key: value}
                field_of[key] = key
            elif key in extras:
                continue
            else:
                refuse(key, "unknown field: not a section, a setting or a record of this tfseg")
            for flag, item in entries.items():
                why = saved_type_error(table[flag][1], item)
                if why:
                    refuse(field_of[flag], why)
                flat[flag] = tuple(item) if isinstance(item, list) else item
        try:
            return cls.from_flat(**flat)
        except InputError as error:
            named = re.match(r"--(\w+): (.*)", str(error))
            if named and named.group(1) in field_of:
                refuse(field_of[named.group(1)], named.group(2))
            raise InputError(f"{source}: {error}") from None

    @classmethod
    def changes(cls, saved, config):
        """{flag: (recorded, now)} of the settings a saved dict records that ``config``
        changes (the mode aside: it is what this command does, not the run)."""
        before, now = cls.settings_of(saved), config.flat()
        return {flag: (before[flag], now[flag]) for flag in now
                if flag in before and flag != "mode" and before[flag] != now[flag]}

    @classmethod
    def check_resume(cls, saved, config, source):
        """``changes(saved, config)`` of a resumed run, refusing a change of the settings
        that decide the model's variables (``FIXED_ON_RESUME``) in one line that names the
        flag, the value ``source`` (the run's config.json) records, and the way out."""
        changed = cls.changes(saved, config)
        fixed = [flag for flag in FIXED_ON_RESUME if flag in changed
                 and set(changed[flag]) not in SAME_VARIABLES]
        if fixed:
            recorded = " ".join(f"--{flag}={flag_value(changed[flag][0])}" for flag in fixed)
            given = " ".join(f"--{flag}={flag_value(changed[flag][1])}" for flag in fixed)
            raise InputError(
                f"--{fixed[0]}: the run to resume was trained with {recorded} ({source}); "
                f"its checkpoints do not fit a model of {given}: resume with "
                f"{'that' if len(fixed) == 1 else 'those'}, or train into another "
                f"--model_dir")
        return changed

    @classmethod
    def from_dict(cls, saved):
        """From a saved dict (``settings_of``); settings it lacks keep their defaults."""
        return cls.from_flat(**cls.settings_of(saved))

    def to_dict(self):
        return dataclasses.asdict(self)

    def to_json(self):
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)
