"""TensorFlow's second report of an op's error (and a few notices about TensorFlow's own
internals), kept from the user while a command runs.

When an op fails, TensorFlow's C++ code logs the error as a warning ("OP_REQUIRES failed
at whole_file_read_ops.cc:117 : NOT_FOUND: ...", "Local rendezvous is aborting with
status: INVALID_ARGUMENT: ...") and then raises the same error in Python, where tfseg
reports it: one line naming the file for a bad data file, a traceback for a bug. The
warning adds nothing to the exception, and a user read three lines of TensorFlow's log
before tfseg's one. The notices (``_INTERNAL``, ``_NOTICES``) are about parts of
TensorFlow the user neither chose nor can change. So for the command's run, file descriptor 2 goes through this file
run as a small process of its own (``start``), which drops those records with their
continuation lines and passes everything else on as it comes. A process, not a thread:
what a crashing run writes last (a FATAL record, the fault handler's traceback) still
gets through, since the filter reads its pipe to the end after the writer is gone.
``tfseg --verbose`` runs without it. Standard library only: it runs as a script.

Example:
    from tfseg.cli import stderr_filter
    stderr_filter.start()     # fd 2 -> the filter -> the real stderr
    ...                       # the run
    stderr_filter.stop()      # fd 2 is the real stderr again; all of it written
"""

import os
import re
import select
import signal
import subprocess
import sys

# A log record's first line: absl's ("W0000 00:00:1795.5  5851 file.cc:12] text") or the
# older TensorFlow one ("2024-01-01 12:00:00.000001: W file.cc:12] text").
RECORD = re.compile(r"(?:(?P<a>[IWEF])\d{4} [\d:.]+\s+\d+ |"
                    r"\d{4}-\d\d-\d\d [\d:.]+: (?P<b>[IWEF]) )(?P<where>\S+:\d+)\] (?P<text>.*)")
# The records that repeat an op's error which Python then raises.
_REPEATS = ("OP_REQUIRES failed at ", "Local rendezvous is aborting with status: ")
# Warnings about TensorFlow's own machinery. A tf.distribute strategy that fetches batches
# to the device (``tfseg.data.feed.distribute``) reads them through a MultiDeviceIterator,
# whose per-device dataset is a GeneratorDataset that tf.data's graph rewrites cannot
# serialise: the warning comes with every iterator made, whatever the input pipeline.
_INTERNAL = ("Input of GeneratorDatasetOp::Dataset will not be optimized ",)
# Lines that TensorFlow Lite's runtime prints itself, not as a log record, each time a
# model is opened on the CPU: nothing the user asked or can act on.
_NOTICES = ("INFO: Created TensorFlow Lite XNNPACK delegate for CPU.",)
# How long a line without its newline waits for the rest before it is passed on.
_PARTIAL_WAIT_S = 0.1

_running = None  # (the filter process, the real stderr's duplicate) while started


def repeats_an_error(line):
    """Whether ``line`` (text) starts a warning record that repeats an op's error."""
    return _warning_starting(line, _REPEATS)


def left_out(line):
    """Whether ``line`` (text) starts a record that the filter drops: one that repeats
    an op's error, or a warning about TensorFlow's internals (``_INTERNAL``)."""
    return _warning_starting(line, _REPEATS + _INTERNAL)


def _warning_starting(line, texts):
    match = RECORD.match(line)
    return bool(match) and match["a" if match["a"] else "b"] in "WE" and (
        match["text"].startswith(texts))


def filter_lines(read, write):
    """Copies the bytes ``read()`` gives to ``write`` until ``read`` gives b"", leaving
    out the records ``left_out`` names and their continuation lines (those that
    start with white space). ``read()`` returns b"" at the end, None when nothing came
    for a while (a line without its newline is then passed on as it is)."""
    pending, dropping = b"", False
    while True:
        chunk = read()
        if chunk == b"" or chunk is None:
            if pending and not (dropping and pending[:1].isspace()):
                write(pending)
                dropping = False
            pending = b""
            if chunk == b"":
                return
            continue
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            text = line.decode("utf-8", "replace")
            if dropping and text[:1].isspace():
                continue
            dropping = left_out(text)
            if not dropping and text.rstrip() not in _NOTICES:
                write(line + b"\n")


def _run(source=0, sink=1):
    """The filter process: ``source`` (its stdin) to ``sink`` (the real stderr)."""
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):  # it ends when its writer does
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    broken = []

    def read():
        ready, _, _ = select.select([source], [], [], _PARTIAL_WAIT_S)
        return os.read(source, 65536) if ready else None

    def write(data):
        while data and not broken:
            try:
                data = data[os.write(sink, data):]
            except BrokenPipeError:  # no one reads the real stderr: drain, write nothing
                broken.append(True)

    filter_lines(read, write)


def start():
    """Sends file descriptor 2 through the filter process until ``stop``; a no-op when
    started already or where no process can be started (then fd 2 stays as it was)."""
    global _running
    if _running:
        return
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    real = os.dup(2)
    try:
        process = subprocess.Popen([sys.executable, "-I", os.path.abspath(__file__)],
                                   stdin=read_end, stdout=real, close_fds=True)
    except OSError:
        os.close(real)
        return
    finally:
        os.close(read_end)
    os.dup2(write_end, 2)
    os.close(write_end)
    _running = (process, real)


def stop(timeout_s=5.0):
    """Makes file descriptor 2 the real stderr again and waits (up to ``timeout_s``: a
    process the run started may hold the pipe) until the filter has written all it got."""
    global _running
    if not _running:
        return
    process, real = _running
    _running = None
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os.dup2(real, 2)
    os.close(real)
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        pass


if __name__ == "__main__":
    _run()
