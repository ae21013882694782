"""The driver's kernel cache, large enough that a second run starts warm.

TensorFlow's wheels carry PTX, not machine code, for Hopper (compute 9.0): the driver
compiles every kernel a process first uses and keeps the result in its JIT cache, whose
default size (256 MiB) is too small for TensorFlow's kernels, so each fresh process on an
H100 compiled again (27-102 s before its first step, docs/benchmarks.md).

The size is read when CUDA starts, so `warm_start` runs before TensorFlow is imported,
and never overrides what the user set. XLA's persistent cache of compiled steps is
`tfseg.runtime.xla_cache` (`--compile_cache_dir`), which guards against what TensorFlow
2.21's own cache does with a damaged entry or a full disk.

Example:

    from tfseg.runtime import caches
    caches.warm_start()   # then import tensorflow
"""

import os

CUDA_CACHE_BYTES = 4 * 2**30


def warm_start(environ=None):
    """Sets the driver's JIT cache size to 4 GiB where `CUDA_CACHE_MAXSIZE` is unset.
    Returns {name: value} of what it set."""
    environ = os.environ if environ is None else environ
    if "CUDA_CACHE_MAXSIZE" in environ:
        return {}
    environ["CUDA_CACHE_MAXSIZE"] = str(CUDA_CACHE_BYTES)
    return {"CUDA_CACHE_MAXSIZE": environ["CUDA_CACHE_MAXSIZE"]}
