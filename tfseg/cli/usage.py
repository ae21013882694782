"""``tfseg --help``: what the command does, its modes, and every flag by config section.

The flags and their help come from ``tfseg.config`` (the same source as the flags
themselves and docs/cli.md), so the help cannot drift from what a flag does.

Example:
    from tfseg.cli import usage
    print(usage.text())
"""

import dataclasses
import shutil
import textwrap

from tfseg.config import Config, SECTIONS
from tfseg.config.doc import default_text

# A section's heading in the help: the words a user looks for.
TITLES = {"data": "data", "model": "model", "optim": "training", "eval": "evaluation",
          "run": "run"}
MODE_HELP = {
    "train_and_eval": "train, then evaluate the last checkpoint (the default)",
    "train": "train (resumes from --model_dir's latest checkpoint)",
    "eval": "mIoU of a checkpoint on --eval_split; writes MODEL_DIR/eval/",
    "predict": "class maps and overlays for --input_path (an image or a folder)",
    "export": "a SavedModel and a .keras file (--export_format: also tflite, onnx)",
    "report": "training memory of stock vs memory-saving vs recompute, side by side",
    "convert": "the train and eval splits as sharded TFRecords",
    "validate": "print the config these flags make, without TensorFlow",
    "recipes": "list the recipes (--recipe=NAME), one line each, without TensorFlow",
}
HEAD = """\
usage: tfseg [--recipe=NAME | --flagfile=FILE] [--mode=MODE] [--flag=value ...]

Train, evaluate, predict with and export DeepLabv3+ segmentation models, with
memory-saving training for one GPU. Flags may come from a file (--flagfile, one
--flag=value a line) or a recipe shipped with tfseg (--recipe=NAME; --mode=recipes
lists them); a flag given after either wins.
Booleans take --name / --noname; lists are comma-separated (--crop_size=513,513).
Every flag, with more detail: docs/cli.md. Exit codes: 0 done, 2 bad input
(one line naming the flag or file), 3 the loss stopped being finite.
"""


def _columns():
    return max(60, min(100, shutil.get_terminal_size((100, 24)).columns))


def _entry(name, help_, width, indent=24):
    """``  --name   help``, the help wrapped under itself (below the name if it is long)."""
    lead, pad = f"  {name}", " " * indent
    body = textwrap.fill(" ".join(help_.split()), width, initial_indent=pad,
                         subsequent_indent=pad)
    if len(lead) < indent - 1:
        return lead + body[len(lead):]
    return lead + "\n" + body


def text():
    """The whole help, as printed by ``tfseg --help``."""
    width = _columns()
    lines = [HEAD, "modes (--mode):"]
    lines += [_entry(name, help_, width) for name, help_ in MODE_HELP.items()]
    defaults = Config().flat()
    for section, cls in SECTIONS.items():
        lines += ["", f"{TITLES[section]} flags:"]
        for field in dataclasses.fields(cls):
            flag = field.metadata["flag"] or field.name
            help_ = field.metadata["help"].replace("``", "")
            if "default:" not in help_:  # a help that says its default says it once
                help_ += f" (default: {default_text(defaults[flag])})"
            lines.append(_entry(f"--{flag}", help_, width))
    lines += ["",
              "  --recipe=NAME           read a recipe's flags here (--mode=recipes lists them)",
              "  --verbose               also print TensorFlow's start-up and INFO lines",
              "  --help, -h              this help"]
    return "\n".join(lines) + "\n"
