"""TensorFlow imported without its start-up lines, its warnings and errors kept, and the
device it runs on named in one line.

TensorFlow's C++ libraries log on load ("All log messages before absl::InitializeLog()
…", "oneDNN custom operations are on …", "This TensorFlow binary is optimized …"): INFO
lines, written before ``TF_CPP_MIN_LOG_LEVEL`` is read, so no level hides them, and
twice (two libraries hold the same code). So the import runs with file descriptor 2 sent
to a temporary file, which is then sorted (``sort``): INFO records are dropped, each
WARNING, ERROR or FATAL record is written once, as one line, and any other text as it
came; all of it when the import fails (it explains a broken install). absl's notice,
which comes before the first record, is drawn out inside the capture where the import
logs none (oneDNN off: ``_take_notice``). For the rest of the run
``TF_CPP_MIN_LOG_LEVEL`` is 1 unless the user set it: INFO lines stay hidden, warnings
and errors reach stderr as TensorFlow writes them, but for its report of an op's error
that Python raises too (``tfseg.cli.stderr_filter``).

The device query runs captured too: where TensorFlow finds no GPU, what it said about
GPUs (a CUDA library it could not load, cuInit's error) becomes the device line's reason
instead of lines of its own. ``verbose`` shows every line as TensorFlow writes it.

Example:
    from tfseg.cli import quiet
    print(quiet.import_tensorflow())   # "device: CPU (TensorFlow sees no GPU: ...)"
"""

import contextlib
import faulthandler
import functools
import os
import re
import sys
import tempfile

from tfseg.cli.stderr_filter import RECORD as _RECORD

# Lines that start text of their own, never a continuation of the record before them:
# Python's warnings ("x.py:3: UserWarning: ..."), its logging ("WARNING:tensorflow:..."),
# a traceback, a fatal error's report.
_OWN_TEXT = re.compile(r"\S+:\d+: \w*Warning: |[A-Z]+:[\w.]*:|Traceback \(most recent call|"
                       r"Fatal Python error|Segmentation fault|\w+(Error|Exception)\b")
# absl's notice that it is not initialised yet: a start-up line.
_ABSL_NOTICE = "WARNING: All log messages before absl::InitializeLog() is called"
# The warning logged to take that notice where the import logs nothing (``_take_notice``).
_TAKER = f"Could not open {os.devnull}: "
# What an INFO record about GPUs says that explains finding none ("Could not find cuda
# drivers on your machine"): kept for the device line.
_ABOUT_GPUS = re.compile(r"cuda|gpu|cuinit|dlopen|libcu|nvidia", re.IGNORECASE)


def sort(text):
    """What a captured stretch of TensorFlow's stderr shows the user.

    Args:
      text: the captured text.

    Returns:
      (lines, gpu_notes): ``lines`` are (line, about_gpus) for each WARNING, ERROR or
      FATAL record, as one line (its continuation lines joined by a space) and once, and
      for the text that is no record, in order; ``gpu_notes`` the messages of the records
      about GPUs, INFO ones included.

    Example:
      sort("I0000 00:00:1.0  7 port.cc:153] oneDNN custom operations are on.\n")
      # ([], [])
    """
    chunks = []  # [level or None, first line, [continuation lines], message]
    for line in text.splitlines():
        match = _RECORD.match(line)
        if match:
            chunks.append([match["a"] or match["b"], line, [], match["text"]])
        elif line.startswith(_ABSL_NOTICE) or not line.strip():
            continue
        elif chunks and chunks[-1][0] and not _OWN_TEXT.match(line):
            chunks[-1][2].append(line.strip())
        else:
            chunks.append([None, line, [], line])
    lines, seen, gpu_notes = [], set(), []
    for level, first, more, message in chunks:
        message = " ".join([message, *more])
        about_gpus = bool(level and _ABOUT_GPUS.search(message))
        if about_gpus and message not in gpu_notes:
            gpu_notes.append(message)
        # The same record from another library, or again: its time stamp differs.
        key = (level, _RECORD.match(first)["where"], message) if level else first
        if level == "I" or (level and key in seen) or message.startswith(_TAKER):
            continue
        seen.add(key)
        lines.append((" ".join([first, *more]), about_gpus))
    return lines, gpu_notes


@contextlib.contextmanager
def _captured():
    """File descriptor 2 into a file while in the block; yields a list that holds the text
    once the block ends. On an exception all of it is shown first. A crash that ends the
    process at once (a FATAL record's abort, a segfault) runs no cleanup: Python's fault
    handler writes its traceback to the real stderr, and what TensorFlow wrote stays in
    ``tfseg-start-up-*.log`` in the temporary folder."""
    caught = []
    sys.stderr.flush()
    handler_was_on = faulthandler.is_enabled()
    with tempfile.NamedTemporaryFile(prefix="tfseg-start-up-", suffix=".log",
                                     delete=False) as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        if not handler_was_on:  # one already on (a test runner's) keeps its own file
            faulthandler.enable(file=saved)
        try:
            yield caught
        except BaseException:
            os.dup2(saved, 2)
            sink.seek(0)
            sys.stderr.write(sink.read().decode(errors="replace"))
            raise
        finally:
            os.unlink(sink.name)
            sys.stderr.flush()
            os.dup2(saved, 2)
            if not handler_was_on:
                faulthandler.disable()
            os.close(saved)
        sink.seek(0)
        caught.append(sink.read().decode(errors="replace"))


@functools.cache  # absl writes its notice once a process
def _take_notice():
    """Has absl write its "All log messages before absl::InitializeLog() ..." notice now,
    while captured. absl writes it once, before the first record TensorFlow's C++ code
    logs: where oneDNN is on (TensorFlow's default on CPUs with AVX-512) its start-up
    record takes it during the import; where it is off (other CPUs, or
    TF_ENABLE_ONEDNN_OPTS=0) the import logs nothing, and the notice came out at the first
    later warning. A harmless warning does it: the V1 checkpoint reader's, on an empty
    file, which sets up no device and writes nothing; ``sort`` drops the record."""
    import tensorflow as tf
    from tensorflow.python.training import py_checkpoint_reader

    try:
        py_checkpoint_reader.NewCheckpointReader(os.devnull)
    except tf.errors.OpError:  # DataLossError: not a checkpoint, as intended
        pass


def import_tensorflow(verbose=False):
    """Imports TensorFlow (and Keras): its start-up lines dropped unless ``verbose``, its
    warnings and errors one line each. Idempotent: once imported, it only describes.

    Returns:
      The device line (``tfseg.runtime.device.describe``), e.g. "device: GPU:0 (NVIDIA
      H100 80GB HBM3)"; the caller prints it.
    """
    if verbose:
        import keras  # noqa: F401  (imports TensorFlow, its backend)

        from tfseg.runtime import device
        return device.describe()
    # Read when TensorFlow's libraries load: from then on INFO lines are not written.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    with _captured() as caught:
        import keras  # noqa: F401  (imports TensorFlow, its backend)
        import tensorflow  # noqa: F401

        from tfseg.runtime import device
        gpus = device.name() != "CPU:0"  # looking for GPUs logs what it finds wrong
        _take_notice()
    lines, gpu_notes = sort(caught[0])
    # Without a GPU, what TensorFlow said about GPUs is the device line's reason instead.
    shown = [line for line, about_gpus in lines if gpus or not about_gpus]
    if shown:
        sys.stderr.write("".join(f"{line}\n" for line in shown))
        sys.stderr.flush()
    return device.describe(() if gpus else gpu_notes)
