"""The ``tfseg`` command (and ``python main.py``): flags in, one ``Config``, one mode run.

Flags are defined and read here only. Each is a field of ``tfseg.config.Config``
(name, default, help), and they become one frozen ``Config``, which is all the
library sees. Errors in what the user gave (flags, files, checkpoints) are one line
on stderr and exit code 2; a loss that stops being finite is exit code 3.

Example:
    tfseg                                  # train the synthetic default, then evaluate it
    tfseg --mode=eval --model_dir=runs/synthetic
    tfseg --recipe=cityscapes_xception65_os16_fullres    # = --flagfile=flags/....flags
"""

import atexit
import gc
import os
import signal
import sys

from absl import app, flags

# None of these imports TensorFlow: --mode=validate and --help run without it.
from tfseg import recipes
from tfseg.cli import modes, quiet, stderr_filter, usage
from tfseg.config import Config, flag_table
from tfseg.config.names import BUILTIN_BACKBONE
from tfseg.config.values import kind_of
from tfseg.errors import InputError, NonFiniteLoss, TrainedSettingError
from tfseg.runtime import caches, xla_cache

PROG = "tfseg"
HELP = ("--help", "-h", "--helpfull", "--helpshort", "-?")
# The recipe that gave each setting's value, by flag name (``recipes.given_by``), which
# parse_flags sets: a refusal of a recipe's value names the recipe, not a flag never typed.
FROM_RECIPE = {}


class _Text(flags.ArgumentParser):
    """A setting's flag keeps the text given (or the default): ``Config.from_flags`` parses
    it with the parser that reads the Python API's values (``tfseg.config.values``), so
    the two refuse the same settings with the same line ("--train_steps: must be an
    integer, got '2.7'")."""

    def __init__(self, kind):
        self.kind = kind

    def parse(self, argument):
        return argument

    def flag_type(self):
        return self.kind


class _Serializer(flags.ArgumentSerializer):
    def serialize(self, value):
        return ",".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)


def define_flags():
    """One flag per setting of ``tfseg.config.Config``: name, default, help and kind are
    the field's (booleans also take --noname); plus --verbose, which is the command's own."""
    defaults = Config().flat()
    for name, (_, field) in flag_table().items():
        default = defaults[name]
        # A setting that was once a bool keeps --name and --noname (its aliases).
        boolean = isinstance(default, bool) or bool(field.metadata.get("aliases"))
        flags.DEFINE_flag(flags.Flag(_Text(kind_of(field)), _Serializer(), name, default,
                                     field.metadata["help"], boolean=boolean))
    flags.DEFINE_bool("verbose", False, "Also print TensorFlow's start-up and INFO lines.")


define_flags()
FLAGS = flags.FLAGS


def config_from_flags():
    """The one place where flags become a ``Config``."""
    config = Config.from_flags({name: FLAGS[name].value for name in flag_table()})
    if config.run.mode not in modes.NO_TENSORFLOW:
        caches.warm_start()  # read when TensorFlow and CUDA start: oneDNN, the driver's cache
        if config.run.jit_compile != "off":  # XLA's flags too
            xla_cache.use(config.run.compile_cache_dir)
        # The device, named once: a broken CUDA install would train on the CPU unnoticed.
        print(quiet.import_tensorflow(FLAGS.verbose), flush=True)
    if config.run.init_checkpoint and config.run.mode not in (*modes.NO_TENSORFLOW, "convert"):
        from tfseg.runtime import init

        # Before adapt, which would take the checkpoint's Xception-65 settings.
        backbone, path = config.model.backbone, config.run.init_checkpoint
        if backbone != BUILTIN_BACKBONE and init.resolve(path)[1] == init.RESEARCH_DEEPLAB:
            raise InputError(f"--init_checkpoint: {path} is a research/deeplab xception_65 "
                             f"checkpoint, for --backbone={BUILTIN_BACKBONE}; --backbone="
                             f"{backbone} starts from --backbone_weights")
        # What the checkpoint implies (width, middle units, conventions) for every
        # setting that no flag or flagfile gave.
        given = {name for name in flag_table() if FLAGS[name].present}
        config = init.adapt(config, given)
    return config


def error_line(message):
    """``tfseg: error: MESSAGE``, one line: absl's own "ERROR::" prefix dropped."""
    first = str(message).splitlines()[0] if str(message) else "error"
    return f"{PROG}: error: {first.removeprefix('ERROR:: ')}"


def usage_error(message):
    print(error_line(message), file=sys.stderr)
    sys.exit(2)


def parse_flags(argv):
    """absl parsing, but --help is the grouped help (exit 0), --recipe=NAME reads a
    recipe as --flagfile would, and a bad flag is one line on stderr and exit code 2."""
    if any(arg.split("=")[0] in HELP for arg in argv[1:]):
        sys.stdout.write(usage.text())
        sys.exit(0)
    try:
        remaining = FLAGS(recipes.expand(argv, recipes.read_flagfiles))
        FROM_RECIPE.clear()
        FROM_RECIPE.update(recipes.given_by(argv, flag_table()))
        return remaining
    except (flags.Error, InputError) as error:
        usage_error(error)


def main(argv):
    from absl import logging

    # TF's checkpoint INFO lines would drown the progress lines.
    logging.set_verbosity(logging.INFO if FLAGS.verbose else logging.WARNING)
    if len(argv) > 1:
        usage_error(f"unexpected arguments: {' '.join(argv[1:])}")
    try:
        config = config_from_flags()
        modes.GIVEN = frozenset(name for name in flag_table() if FLAGS[name].present)
        if config.run.mode not in modes.STOPPABLE:
            modes.exit_if_stopped(finished=False)  # a signal during start-up
            modes.STOP.__exit__()  # Python's default handling from here on
        modes.MODES[config.run.mode](config)
        return 0
    except BrokenPipeError:
        # The reader of stdout went away (``tfseg --mode=validate | head``): nothing to say.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (InputError, OSError) as error:
        # Bad flags, files or checkpoints: one line that names them. Any other
        # exception is a bug and keeps its traceback.
        if isinstance(error, TrainedSettingError):
            error = error.naming_recipes(FROM_RECIPE)
        usage_error(error if str(error) else type(error).__name__)
    except NonFiniteLoss as error:
        print(error_line(error), file=sys.stderr)
        return 3
    except KeyboardInterrupt as error:
        # Ctrl-C where Python's own handling is in place (export, predict, convert): the
        # write under way removed what it built (tfseg.io.outputs); one line saying so
        # (the library's, else the mode's), then the end Python's would be (130 in a
        # shell), without its traceback.
        said = str(error) or (f"interrupted during --mode={FLAGS.mode}; each output is "
                              f"the previous one or the new one, whole")
        print(f"{PROG}: {said}", file=sys.stderr, flush=True)
        name = "SIGINT"
    except BaseException as error:
        # A signal during a write that arrived between the end of the write's block and
        # its cleanup reaches here (tfseg.io.outputs.Interrupted): end as the signal
        # would have, once the write's cleanup has run.
        outputs = sys.modules.get("tfseg.io.outputs")
        if outputs is None or not isinstance(error, outputs.Interrupted):
            raise
        name = error.args[0]
    gc.collect()  # the write's suspended cleanup, freed with the exception, runs first
    stderr_filter.stop()
    signal.signal(signal.Signals[name], signal.SIG_DFL)
    signal.raise_signal(signal.Signals[name])


def safe_output():
    """stdout and stderr write what their encoding cannot as ``\\xfc``-style escapes: with
    an ASCII stdout (``PYTHONIOENCODING=ascii``, a C locale), a path or class name such
    as ``ünï`` in a line raised ``UnicodeEncodeError`` (exit 1) wherever it was printed."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):  # a TextIOWrapper (not a test's StringIO)
            stream.reconfigure(errors="backslashreplace")


def end(code):
    """Ends the process with ``code`` once the mode is over: its outputs are whole (saved,
    flushed, swapped into place) and reported, and what is left is Python's and
    TensorFlow's teardown, which only frees memory. That teardown took 1-2 s here and
    ~11 s on a loaded machine (TensorFlow's runtime and its thread pools, destroyed after
    Python has restored the default signal handlers), and a Ctrl-C or SIGTERM in it
    killed a finished run: exit 130 or 143. So the process ends now, its streams flushed."""
    import logging

    logging.shutdown()  # absl's handler writes to stderr
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe, a closed stream: nothing to keep
            pass
    stderr_filter.stop()
    os._exit(code)


def finished(signum, frame):
    """Ctrl-C or SIGTERM once the mode has returned: end as the finished run ends."""
    end(0)


def run():
    """The console script's entry point: ``tfseg [flags]``."""
    modes.STOP.__enter__()  # for the whole process: there is nothing to restore at its end
    safe_output()

    def main_then_end(argv):
        if not FLAGS.verbose and FLAGS.mode not in modes.NO_TENSORFLOW:
            # TensorFlow's log of an op's error that Python raises too, left out.
            stderr_filter.start()
            atexit.register(stderr_filter.stop)  # a bug's traceback: written before the end
        try:
            code = main(argv)
        except SystemExit as exit_:  # a usage error's exit 2, printed already
            if not (exit_.code is None or isinstance(exit_.code, int)):
                raise
            code = exit_.code or 0
        if code == 0:
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, finished)
        end(code)

    app.run(main_then_end, flags_parser=parse_flags)
