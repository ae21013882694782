"""XLA's persistent compilation cache, made safe to leave on: a second process with the
same shapes loads the compiled blocks instead of compiling them again.

TensorFlow writes each compiled computation to its cache folder whole (a temporary file
renamed into place), so two processes may share one. But in TensorFlow 2.21 a damaged
entry fails every later run that looks it up ("Read less bytes than requested"), a
failed write (a full disk) fails the step ("File too large"), and an entry's key names
neither the GPU nor TensorFlow's version. So `use`:

- keeps one subfolder per TensorFlow version and device (`tf-2.21.0-NVIDIA_H200`);
- reads every entry before the first compilation, and removes one that does not parse,
  saying so in one line (it compiles again);
- removes what a killed writer left (`*.tmp` of a process that is gone);
- only reads the cache where its disk has less than `MIN_FREE_BYTES` free, and leaves
  it off, in one line, where the folder cannot be written.

TensorFlow reads `TF_XLA_FLAGS` once, when it first sets up its devices, so `use` runs
before that, and imports no TensorFlow: the command calls it before TensorFlow's import
(`tfseg.cli`), a training run again before it builds anything (a no-op where the
command did). A `--tf_xla_persistent_cache_directory` the user set wins.

Example:
    from tfseg.runtime import xla_cache
    folder = xla_cache.use("auto")     # ~/.cache/tfseg/xla/tf-2.21.0-cpu, or None
"""

import glob
import importlib.metadata
import os
import re
import socket

from google.protobuf import empty_pb2

from tfseg.units import GIB, MIB

MIN_FREE_BYTES = 2 * GIB
_FLAG = "--tf_xla_persistent_cache_directory"


def default_folder(environ=None):
    """The user's cache folder for tfseg's compiled blocks (XDG's convention)."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tfseg", "xla")


def use(setting, log=print, device=None, environ=None):
    """Turns the persistent cache on for this process, in ``setting``'s folder ("auto":
    ``default_folder()``; "off": none). Returns the folder used, or None (also where the
    user set TensorFlow's flag: theirs is used).

    ``device``: the words naming the device (its subfolder); None: the first GPU's name
    (``device_words``)."""
    environ = os.environ if environ is None else environ
    flags = environ.get("TF_XLA_FLAGS", "")
    if setting == "off":
        return None
    device = device or device_words(environ)
    folder = os.path.join(default_folder(environ) if setting == "auto" else setting,
                          re.sub(r"[^\w.-]+", "_", f"tf-{_tf_version()}-{device}"))
    if f"{_FLAG}={folder}" in flags.split():
        return folder  # already on: the command set it before TensorFlow's import
    if _FLAG in flags:
        return None
    if re.search(r"\s", folder):  # TensorFlow's flag parser ends a value at a space
        log(f"compile cache off: {folder} has a space, which TF_XLA_FLAGS cannot carry; "
            f"give --compile_cache_dir a folder without one")
        return None
    try:
        os.makedirs(folder, exist_ok=True)
        disk = os.statvfs(folder)
        free = disk.f_bavail * disk.f_frsize
        if not os.access(folder, os.W_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as error:
        log(f"compile cache off: cannot write {folder} ({error.strerror or error}); "
            f"each process compiles its blocks again (--compile_cache_dir)")
        return None
    _check_entries(folder, log)
    words = [f"{_FLAG}={folder}"]
    if free < MIN_FREE_BYTES:
        words.append("--tf_xla_persistent_cache_read_only=true")
        log(f"compile cache: {free / MIB:,.0f} MiB free on the disk of {folder}: it is "
            f"read, and nothing new is written to it")
    environ["TF_XLA_FLAGS"] = " ".join([flags] + words).strip()
    return folder


def _check_entries(folder, log):
    """Removes entries that do not parse (one line each) and a gone writer's files."""
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.endswith(".tmp"):
            if not _writer_alive(name):
                _remove(path)
            continue
        if not name.endswith(".pb"):
            continue
        why = _damage(path)
        if why:
            _remove(path)
            log(f"compile cache: removed {path}, {why}; it is compiled again")


def _damage(path):
    """Why the entry at ``path`` cannot be read, or None: empty, unreadable, or not a
    protocol buffer (TensorFlow's entry is one; its fields are read as unknown ones)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as error:
        return f"which cannot be read ({error.strerror or error})"
    if not data:
        return "which is empty"
    try:
        empty_pb2.Empty().ParseFromString(data)
    except Exception:  # noqa: BLE001 (protobuf's DecodeError differs by implementation)
        return "which is damaged (not a whole entry)"
    return None


def _writer_alive(name):
    """Whether the process that writes the temporary file ``name`` may still run: TF
    names it ENTRY.pbHOST-THREAD-PID-TIME.tmp; a writer on another host (a shared home
    folder) or of a name not TensorFlow's is taken as alive."""
    parts = name.rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit() or \
            f".pb{socket.gethostname()}-" not in parts[0]:
        return True
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _remove(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass  # another process removed it first


def device_words(environ=None):
    """The first visible NVIDIA GPU's model ("NVIDIA H200"), read from the driver's files
    without TensorFlow or CUDA (which would read XLA's flags first); "cpu" without one."""
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and not visible.strip():
        return "cpu"
    models = []
    for info in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):
        with open(info, errors="replace") as f:
            models += [line.split(":", 1)[1].strip() for line in f if line.startswith("Model:")]
    if not models:
        return "cpu"
    first = visible.split(",")[0].strip() if visible else "0"
    return models[int(first)] if first.isdigit() and int(first) < len(models) else models[0]


def _tf_version():
    """TensorFlow's version, from its installed package (no import)."""
    for name in ("tensorflow", "tensorflow-cpu", "tf-nightly"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"
