"""When an allocator's peak measures a training step, and when it is unknown.

A GPU's allocator (BFC) counts every allocation. The CPU's counts only some: with oneDNN
on (tfseg's default, and always in the report's measuring processes) it is oneDNN's
allocator, which hands every request under 256 KiB to ``malloc`` and keeps no statistics
of those (TensorFlow's ``mkl_cpu_allocator.h``: ``kSmallAllocationsThreshold``, and the
small-size allocator's statistics are compiled off); without oneDNN it keeps none at
all (``get_memory_info`` raises). A small step (a narrow model at a small crop, more so
its memory-saving twins, whose buffers are smaller) can then allocate nothing the CPU's
allocator counts: its peak reads 0, or the few hundred KiB of its one or two largest
buffers, while it really used megabytes. Such a reading is no measurement: ``measured``
makes it None, which the progress line replaces by the resident size and the report
shows as "n/a" (a ratio of it is unknown too), never as 0.

``TF_CPU_ALLOCATOR_USE_BFC=1`` gives the CPU a BFC allocator that counts everything (and
keeps statistics without oneDNN too); tfseg does not set it, since it changes the
allocator every CPU measurement and benchmark here was made with.

Example:
    from tfseg.runtime import peak
    peak.uncounted_below("CPU:0")   # 262144: oneDNN's allocator counts no smaller buffer
    peak.measured(300 * 1024, "CPU:0")   # None: one buffer's worth, not the step's
    peak.measured(9 * 2**20, "CPU:0")    # 9437184
    peak.measured(0, "GPU:0")            # None: a step allocates something
"""

import os

# oneDNN's CPU allocator sends smaller requests to malloc, uncounted.
ONEDNN_UNCOUNTED_BELOW = 256 * 1024
# A peak under this many of the smallest buffers the allocator counts is mostly what it
# does not count: a step has tens to hundreds of buffers, each up to 256 KiB unseen.
MEASURABLE_BUFFERS = 4
UNKNOWN = "n/a"  # how an unknown peak, and any ratio of one, is shown


def uncounted_below(device, environ=None):
    """Bytes under which the allocator of ``device`` ("CPU:0", "GPU:0": what
    ``tfseg.runtime.device.name()`` gives) counts no allocation: 256 KiB on the CPU,
    0 on a GPU or where ``TF_CPU_ALLOCATOR_USE_BFC`` is on (``environ``: ``os.environ``
    when None, read as TensorFlow reads a boolean: "1" or "true")."""
    environ = os.environ if environ is None else environ
    if not device.upper().startswith("CPU"):
        return 0
    if environ.get("TF_CPU_ALLOCATOR_USE_BFC", "").strip().lower() in ("1", "true"):
        return 0
    return ONEDNN_UNCOUNTED_BELOW


def measured(peak_bytes, device, environ=None):
    """``peak_bytes`` (an allocator's peak, or a step's peak over its base) where it
    measures the step, else None: when it is None, 0 (a training step allocates
    something), or under ``MEASURABLE_BUFFERS`` of the smallest buffers the allocator
    counts (1 MiB on the CPU, see the module's note)."""
    if peak_bytes is None or peak_bytes <= 0:
        return None
    if peak_bytes < MEASURABLE_BUFFERS * uncounted_below(device, environ):
        return None
    return peak_bytes


def median(values):
    """The median of peaks, None if any is unknown (the same step read two ways says
    it sits at the edge of what the allocator counts). Example: ``median([3, None])``
    is None; ``median([1, 5, 3])`` is 3."""
    import statistics

    if not values or any(v is None for v in values):
        return None
    return int(statistics.median(values))


def largest(values):
    """The largest of peaks, None if any is unknown."""
    if not values or any(v is None for v in values):
        return None
    return max(values)
