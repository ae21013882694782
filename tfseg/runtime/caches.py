"""Compilation caches that outlive a process, so a second run starts warm.

TensorFlow's wheels carry PTX, not machine code, for Hopper (compute 9.0): the driver
compiles every kernel a process first uses and keeps the result in its JIT cache, whose
default size (256 MiB) is too small for TensorFlow's kernels, so each fresh process on an
H100 compiled again (27-102 s before its first step, docs/benchmarks.md). XLA's compiled
steps are kept by TensorFlow's persistent cache, which is off unless a directory is named.

Both are environment settings read when TensorFlow and CUDA start, so `warm_start` runs
before TensorFlow is imported, and never overrides what the user set.

Example:

    from tfseg.runtime import caches
    caches.warm_start()   # then import tensorflow
"""

import os

CUDA_CACHE_BYTES = 4 * 2**30
XLA_FLAG = "--tf_xla_persistent_cache_directory"


def cache_root(environ=None):
    """The user's cache folder for tfseg: $XDG_CACHE_HOME/tfseg, else ~/.cache/tfseg."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tfseg")


def warm_start(environ=None):
    """Sets, where unset, the driver's JIT cache size (4 GiB) and XLA's persistent cache
    (under `cache_root`). Returns {name: value} of what it set; a cache folder that cannot
    be made is left out (TensorFlow then compiles as before)."""
    environ = os.environ if environ is None else environ
    done = {}
    if "CUDA_CACHE_MAXSIZE" not in environ:
        environ["CUDA_CACHE_MAXSIZE"] = done["CUDA_CACHE_MAXSIZE"] = str(CUDA_CACHE_BYTES)
    xla_flags = environ.get("TF_XLA_FLAGS", "")
    if XLA_FLAG not in xla_flags:
        folder = os.path.join(cache_root(environ), "xla")
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError:
            return done
        if os.access(folder, os.W_OK):
            environ["TF_XLA_FLAGS"] = f"{xla_flags} {XLA_FLAG}={folder}".strip()
            done["TF_XLA_FLAGS"] = environ["TF_XLA_FLAGS"]
    return done
