"""``Config``: the five sections in one value; flags by name (``flag_table``)."""

import dataclasses
import json

from tfseg.config.names import DATASETS, check, crop_ok
from tfseg.config.sections import SECTIONS, Data, Eval, Model, Optim, Run
from tfseg.errors import InputError


def flag_table():
    """{flag name: (section name, dataclasses.Field)} for every setting, in section order."""
    table = {}
    for section, cls in SECTIONS.items():
        for field in dataclasses.fields(cls):
            table[field.metadata["flag"] or field.name] = (section, field)
    return table


def parse_list(flag, values, items):
    """A list flag's strings as a tuple of ``items[0]``; one value is repeated to ``items[1]``."""
    kind, count = items
    try:
        parsed = tuple(kind(v) for v in values)
    except ValueError:
        raise InputError(f"--{flag}: expected numbers, got {','.join(values)!r}") from None
    if count and len(parsed) == 1:
        parsed *= count
    if count and len(parsed) != count:
        raise InputError(f"--{flag}: expected {count} values, got {len(parsed)}")
    return parsed


@dataclasses.dataclass(frozen=True)
class Config:
    """One run: ``data``, ``model``, ``optim``, ``eval`` and ``run`` sections (see each)."""

    data: Data = dataclasses.field(default_factory=Data)
    model: Model = dataclasses.field(default_factory=Model)
    optim: Optim = dataclasses.field(default_factory=Optim)
    eval: Eval = dataclasses.field(default_factory=Eval)
    run: Run = dataclasses.field(default_factory=Run)

    def __post_init__(self):
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
        table, changes = flag_table(), {}
        for flag, value in flat.items():
            if flag not in table:
                raise TypeError(f"no setting {flag!r}")
            section, field = table[flag]
            changes.setdefault(section, {})[field.name] = value
        return dataclasses.replace(self, **{
            section: dataclasses.replace(getattr(self, section), **values)
            for section, values in changes.items()})

    @classmethod
    def from_flat(cls, **flat):
        """The default config with settings given by flag name."""
        return cls().replace(**flat)

    @classmethod
    def from_flags(cls, values):
        """From {flag name: value} as absl parses them: list flags as lists of strings."""
        table = flag_table()
        flat = {}
        for flag, (_, field) in table.items():
            value = values[flag]
            items = field.metadata["items"]
            flat[flag] = parse_list(flag, value, items) if items else value
        return cls.from_flat(**flat)

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
        return {k: tuple(v) if isinstance(v, list) else v for k, v in flat.items()}

    @classmethod
    def from_dict(cls, saved):
        """From a saved dict (``settings_of``); settings it lacks keep their defaults."""
        return cls.from_flat(**cls.settings_of(saved))

    def to_dict(self):
        return dataclasses.asdict(self)

    def to_json(self):
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)
