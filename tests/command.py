"""The command's ``main`` (tfseg.cli.main) called in this process, as a fresh process would run it.

A run in a fresh process costs TensorFlow's import and a cold first trace (~33 s for a
tiny training run on 2 cores, ~14 s in a warm process). Tests that check an exit code,
a message or the files a run writes call ``run`` instead; only the properties that need a
process of their own (signals, kill -9, file-size limits, several workers, logical
devices, fresh-process memory) start one.

The flags are parsed by absl as ``app.run`` would, and restored afterwards (absl's
``flagsaver``, the pattern of TF Model Garden's tests). What the run writes to stdout and
stderr is captured at the file descriptors too, so TensorFlow's C++ lines count as they
would in a process; the exit code is ``SystemExit``'s, else ``main``'s return value.
"""

import contextlib
import io
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAIN = os.path.join(ROOT, "main.py")


def main_env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")


@contextlib.contextmanager
def _captured_fd(fd):
    """Everything written to ``fd`` (C++ logging included) while in the block."""
    with tempfile.TemporaryFile(mode="w+b") as sink:
        saved = os.dup(fd)
        os.dup2(sink.fileno(), fd)
        text = io.StringIO()
        try:
            yield text
        finally:
            os.dup2(saved, fd)
            os.close(saved)
            sink.seek(0)
            text.write(sink.read().decode(errors="replace"))


def _exit_code(code):
    """What a process exiting with ``sys.exit(code)`` returns to its parent."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def run(*args):
    """``python main.py ARGS`` in this process: a CompletedProcess with text output."""
    import keras
    from absl.testing import flagsaver

    from tfseg.cli import main

    stdout, stderr = io.StringIO(), io.StringIO()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        with _captured_fd(1) as fd_out, _captured_fd(2) as fd_err, \
                contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), \
                flagsaver.flagsaver():
            try:
                code = _exit_code(main.main(main.parse_flags(["main.py", *args])))
            except SystemExit as exit_:
                code = _exit_code(exit_.code)
    finally:
        # What a run sets for the whole process (its dtype policy, the graph's names).
        keras.mixed_precision.set_global_policy("float32")
        keras.backend.clear_session(free_memory=False)
    return subprocess.CompletedProcess(["main.py", *args], code,
                                       stdout.getvalue() + fd_out.getvalue(),
                                       stderr.getvalue() + fd_err.getvalue())


def run_process(*args, timeout=180, **popen_kwargs):
    """``python main.py ARGS`` in a fresh process (for what needs one)."""
    return subprocess.run([sys.executable, MAIN, *args], capture_output=True, text=True,
                          timeout=timeout, env=main_env(), cwd=ROOT, **popen_kwargs)


def children(pid):
    """The pids of the live children of process ``pid`` (their parent pid in
    /proc/PID/stat; zombies, reaped soon, are left out)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(name))
    return found


def alive(pid):
    """True while ``pid`` runs (a zombie, reaped by init soon, counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
