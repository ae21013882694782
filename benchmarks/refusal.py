"""How a benchmark starts and refuses: TensorFlow imported without its start-up lines, and
a refusal (a bad argument, no GPU) as one line on stderr with exit status 2.

    import refusal                                   # beside this file
    parser = refusal.ArgumentParser(description="...")
    args = parser.parse_args()                       # a bad argument: one line, exit 2
    device_line = refusal.quiet_tensorflow()         # "device: CPU (TensorFlow sees no GPU: ...)"
    refusal.refuse("no GPU here")                    # "benchmarks/gpu.py: no GPU here", exit 2
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _prog():
    """The running benchmark as its docstrings name it: "benchmarks/gpu.py"."""
    return f"benchmarks/{os.path.basename(sys.argv[0])}"


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, but an error is one line (the usage is in --help), exit 2."""

    def __init__(self, **kwargs):
        super().__init__(prog=kwargs.pop("prog", _prog()), **kwargs)

    def error(self, message):
        refuse(f"{message} (--help lists the arguments)", prog=self.prog)


def refuse(message, prog=None):
    """Prints "PROG: MESSAGE" on stderr and exits with status 2."""
    print(f"{prog or _prog()}: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def quiet_tensorflow():
    """Imports TensorFlow as the ``tfseg`` command does (``tfseg.cli.quiet``): its start-up
    lines dropped, its warnings and errors kept; returns the device line."""
    if ROOT not in sys.path:  # run from a checkout without an install
        sys.path.insert(0, ROOT)
    from tfseg.cli import quiet

    return quiet.import_tensorflow()
