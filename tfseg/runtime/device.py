"""The device every measurement reads, chosen here once, and its memory outside TF's allocator.

``name()`` is "GPU:0" when TensorFlow sees a GPU, else "CPU:0": the report, the profiler,
the budget's verification, the loop's peak logging, the benchmarks and the tests read
the allocator statistics (``memory_info``, ``reset_peak``) of that device. ``describe()``
is the line the command prints about it: a CPU run says why TensorFlow sees no GPU, so
that a broken CUDA install does not train slowly on the CPU unnoticed, and where tfseg
turned oneDNN's CPU kernels on (``tfseg.runtime.caches.warm_start``) it says so.

``overhead(setting_gb)`` is the device overhead: the memory a GPU process holds outside
TF's allocator (CUDA context, cuDNN/cuBLAS handles and workspaces), which a memory
budget must leave. ``--device_overhead_gb`` (``setting_gb >= 0``) gives it; otherwise it
is 0 on the CPU and, on a GPU, measured with NVML (``nvidia-ml-py``, the ``gpu`` extra) in
a fresh process (``python -m tfseg.runtime.device``): TensorFlow started with memory
growth, a float32 and a bfloat16 conv forward and backward, a matmul and a batch norm
run (so that cuDNN, cuBLAS and their kernels' modules are loaded), then the process's
device memory less the allocator's peak.

TensorFlow is imported inside the functions: the profiler's parent process, which calls
``name()``, may not have it loaded, and the probe must set memory growth first.

Example:
    from tfseg.runtime import device
    device.name()                 # "CPU:0" here
    device.describe()             # "device: CPU (TensorFlow sees no GPU: this TensorFlow ...)"
    device.overhead(-1).bytes     # 0 on the CPU
    device.overhead(0.5).source   # "--device_overhead_gb"
"""

import dataclasses
import functools
import json
import os
import subprocess
import sys

from tfseg.errors import InputError
from tfseg.runtime import caches
from tfseg.units import GIB

# The flag that gives the overhead when it cannot be measured, named in every refusal.
FLAG = "--device_overhead_gb"


def name():
    """"GPU:0" when TensorFlow sees a GPU, else "CPU:0".

    Reads the visible physical devices, which starts no CUDA context: a parent that
    measures in child processes leaves the GPU's memory to them."""
    import tensorflow as tf

    return "GPU:0" if tf.config.get_visible_devices("GPU") else "CPU:0"


def describe(logged=()):
    """One line naming the device TensorFlow runs on.

    Args:
      logged: what TensorFlow logged while it looked for GPUs (warnings such as "Cannot
        dlopen some GPU libraries", one string each): the reason on a CUDA build that
        finds none. ``tfseg.cli.quiet`` collects them.

    Returns:
      "device: GPU:0 (NVIDIA H100 80GB HBM3)" (", and N more GPUs" where there are more),
      or "device: CPU (TensorFlow sees no GPU: REASON)", followed on the CPU by "; oneDNN
      on (tfseg's default; TF_ENABLE_ONEDNN_OPTS=0 turns it off)" where tfseg turned it
      on (``caches.onednn_note``; on a GPU it runs only the input pipeline's ops).

    Lists the physical devices only (no CUDA context starts: memory growth can still be set).
    """
    import tensorflow as tf

    gpus = tf.config.get_visible_devices("GPU")
    if not gpus:
        reason = no_gpu_reason(tf.test.is_built_with_cuda(),
                               len(tf.config.list_physical_devices("GPU")), logged)
        note = caches.onednn_note()
        return (f"device: CPU (TensorFlow sees no GPU{': ' + reason if reason else ''})"
                f"{'; ' + note if note else ''}")
    card = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "a GPU")
    more = f", and {len(gpus) - 1} more GPU{'s' * (len(gpus) > 2)}" if len(gpus) > 1 else ""
    return f"device: GPU:0 ({card}){more}"


def no_gpu_reason(cuda_build, physical_gpus, logged=(), environ=None):
    """Why TensorFlow sees no GPU, as far as can be told, or None.

    Args:
      cuda_build: ``tf.test.is_built_with_cuda()``.
      physical_gpus: how many GPUs ``tf.config.list_physical_devices`` gives.
      logged: TensorFlow's messages while it looked for them (see ``describe``).
      environ: the environment (``os.environ`` when None).

    Example:
      no_gpu_reason(True, 0, ["failed call to cuInit: CUDA_ERROR_NO_DEVICE"])
      # "failed call to cuInit: CUDA_ERROR_NO_DEVICE"
    """
    environ = os.environ if environ is None else environ
    if not cuda_build:
        return "this TensorFlow build has no CUDA (the gpu extra has one: pip install 'tfseg[gpu]')"
    if physical_gpus:
        return f"{physical_gpus} hidden by tf.config.set_visible_devices"
    hidden = environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES={hidden!r}"
    return "; ".join(dict.fromkeys(logged)) or None


def memory_info():
    """``tf.config.experimental.get_memory_info`` of ``name()``: {"current", "peak"} bytes.
    On the CPU the allocator keeps statistics only with ``TF_ENABLE_ONEDNN_OPTS=1``."""
    import tensorflow as tf

    return tf.config.experimental.get_memory_info(name())


def reset_peak():
    """Starts ``memory_info()["peak"]`` over from the bytes in use now."""
    import tensorflow as tf

    tf.config.experimental.reset_memory_stats(name())


@dataclasses.dataclass(frozen=True)
class Overhead:
    """The device overhead: ``bytes`` (None when not measured) and where it comes from."""

    device: str
    bytes: int
    source: str

    def to_dict(self):
        return {"device": self.device, "overhead_bytes": self.bytes,
                "overhead_source": self.source}


def overhead(setting_gb=-1.0, required=True):
    """The device overhead of ``name()``.

    Args:
      setting_gb: ``--device_overhead_gb``: used when >= 0; -1 measures it.
      required: on a GPU where it cannot be measured (no NVML), raise ``InputError``
        naming ``--device_overhead_gb``; else return it with ``bytes`` None and the
        reason as its source (config.json's record of a run without a budget).
    """
    device = name()
    if setting_gb >= 0:
        return Overhead(device, int(setting_gb * GIB), FLAG)
    if device.startswith("CPU"):
        return Overhead(device, 0, "none on the CPU")
    try:
        return Overhead(device, measured_gpu_overhead(), "measured (NVML)")
    except InputError as error:
        if required:
            raise
        return Overhead(device, None, f"not measured: {error}")


@functools.lru_cache(maxsize=None)
def measured_gpu_overhead(timeout=300):
    """Bytes of GPU:0 outside TF's allocator, measured in a fresh process (``probe``);
    once per process. Raises ``InputError`` (one line naming ``--device_overhead_gb``)
    when NVML is absent or the probe fails."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-m", "tfseg.runtime.device"], capture_output=True,
                          text=True, timeout=timeout, env=env)
    lines = (proc.stdout.strip() or proc.stderr.strip() or "(no output)").splitlines()
    if proc.returncode != 0:
        raise InputError(f"{FLAG}: could not measure the GPU's overhead ({lines[-1]}); "
                         f"give it, in GiB")
    return int(json.loads(lines[-1])["overhead_bytes"])


def _nvml():
    """The ``pynvml`` module, initialised; ``InputError`` naming the gpu extra if absent."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception as error:  # ImportError, or NVMLError: no driver library
        raise InputError(f"NVML is not available ({type(error).__name__}: {error}); "
                         f"install nvidia-ml-py (pip install 'tfseg[gpu]')") from None
    return pynvml


def _used(pynvml):
    """(device memory used per NVML device, this process's use per device or None)."""
    used, mine = [], []
    for i in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        used.append(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
        try:
            processes = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except pynvml.NVMLError:  # not supported here: the device's growth stands in
            processes = []
        mine.append(next((p.usedGpuMemory for p in processes if p.pid == os.getpid()), None))
    return used, mine


def _warm_up(tf):
    """Runs what a training step's kernels need loaded: conv forward/backward in float32
    and bfloat16 (cuDNN), a matmul (cuBLAS), a fused batch norm."""
    for dtype in (tf.float32, tf.bfloat16):
        x = tf.random.uniform((2, 33, 33, 8), dtype=tf.float32)
        kernel = tf.Variable(tf.random.uniform((3, 3, 8, 8)))
        with tf.GradientTape() as tape:
            y = tf.nn.conv2d(tf.cast(x, dtype), tf.cast(kernel, dtype), 1, "SAME")
            y, _, _ = tf.compat.v1.nn.fused_batch_norm(tf.cast(y, tf.float32),
                                                       tf.ones(8), tf.zeros(8))
            z = tf.matmul(tf.reshape(y, (-1, 8)), tf.ones((8, 8)))
        float(tf.reduce_sum(tape.gradient(z, kernel)))


def probe():
    """In a fresh process: {"overhead_bytes", "process_bytes", "allocator_peak_bytes",
    "how"} of GPU:0. NVML first (it starts no CUDA context), then TensorFlow with memory
    growth; the process's NVML use where NVML reports it per process (not inside every
    container), else the growth of the device's use (other processes' changes count)."""
    pynvml = _nvml()
    before, _ = _used(pynvml)
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        raise InputError("TensorFlow sees no GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    _warm_up(tf)
    peak = tf.config.experimental.get_memory_info("GPU:0")["peak"]
    after, mine = _used(pynvml)
    growth = [a - b for a, b in zip(after, before)]
    index = max(range(len(growth)), key=growth.__getitem__)
    # With several GPUs TF starts a context on each; the largest use is GPU:0's (its
    # warm-up ran there).
    mine_here = [m for m in mine if m is not None]
    process = max(mine_here) if mine_here else growth[index]
    how = "process use (NVML)" if mine_here else "device use growth (NVML)"
    # The allocator's regions hold at least its peak: what is left is outside it.
    return {"overhead_bytes": max(0, int(process - peak)), "process_bytes": int(process),
            "allocator_peak_bytes": int(peak), "how": how}


if __name__ == "__main__":
    try:
        print(json.dumps(probe()))
    except InputError as error:
        print(error, file=sys.stderr)
        sys.exit(2)
