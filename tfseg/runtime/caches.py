"""What a run sets before TensorFlow is imported, where the user set nothing: the
driver's kernel cache, large enough that a second run starts warm, and oneDNN on.

TensorFlow's wheels carry PTX, not machine code, for Hopper (compute 9.0): the driver
compiles every kernel a process first uses and keeps the result in its JIT cache, whose
default size (256 MiB) is too small for TensorFlow's kernels, so each fresh process on an
H100 compiled again (27-102 s before its first step, docs/benchmarks.md).

TensorFlow turns oneDNN's CPU kernels on by default only on CPUs with AVX-512; on others
(an AMD EPYC without it) the default run trained at 18.5 img/s with them off, 24.5 with
``TF_ENABLE_ONEDNN_OPTS=1``. So tfseg turns them on where the user has not set the
variable, as TensorFlow does on the CPUs that have AVX-512: the same kernels, so results
stay as they are there; on a GPU they run only the CPU's ops (the input pipeline). The
command's device line says so (``onednn_note``); ``TF_ENABLE_ONEDNN_OPTS=0`` turns them off.

Both are read when TensorFlow (and CUDA) start, so `warm_start` runs before TensorFlow is
imported, and never overrides what the user set; where TensorFlow is already imported
(a notebook, a test) it leaves oneDNN's variable alone: it would no longer be read, and a
line would claim what is not so. XLA's persistent cache of compiled steps is
`tfseg.runtime.xla_cache` (`--compile_cache_dir`), which guards against what TensorFlow
2.21's own cache does with a damaged entry or a full disk.

Example:

    from tfseg.runtime import caches
    caches.warm_start()   # then import tensorflow
    caches.onednn_note()  # "oneDNN on (tfseg's default; TF_ENABLE_ONEDNN_OPTS=0 turns it off)"
"""

import os
import sys

from tfseg.units import GIB

CUDA_CACHE_BYTES = 4 * GIB
ONEDNN = "TF_ENABLE_ONEDNN_OPTS"
# What this process's warm_start set in os.environ: {name: value}.
_SET = {}


def warm_start(environ=None, tensorflow_imported=None):
    """Sets, where unset: ``CUDA_CACHE_MAXSIZE`` to 4 GiB, and ``TF_ENABLE_ONEDNN_OPTS`` to 1
    unless TensorFlow is imported already.

    Args:
      environ: the environment (``os.environ`` when None).
      tensorflow_imported: whether TensorFlow is imported (``sys.modules`` when None).

    Returns:
      {name: value} of what it set.
    """
    environ = os.environ if environ is None else environ
    if tensorflow_imported is None:
        tensorflow_imported = "tensorflow" in sys.modules
    chosen = {"CUDA_CACHE_MAXSIZE": str(CUDA_CACHE_BYTES)}
    if not tensorflow_imported:
        chosen[ONEDNN] = "1"
    set_here = {name: value for name, value in chosen.items() if name not in environ}
    environ.update(set_here)
    if environ is os.environ:
        _SET.update(set_here)
    return set_here


def onednn_note():
    """"oneDNN on (tfseg's default; TF_ENABLE_ONEDNN_OPTS=0 turns it off)" where this
    process's ``warm_start`` turned oneDNN on (and the variable still says so), else None:
    where the user set it, or TensorFlow was imported first, there is nothing of tfseg's
    to say."""
    if _SET.get(ONEDNN) and os.environ.get(ONEDNN) == _SET[ONEDNN]:
        return f"oneDNN on (tfseg's default; {ONEDNN}=0 turns it off)"
    return None
