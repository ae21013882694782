"""How large a .tflite's ``--export_size`` may be on this machine.

The conversion's memory grows with the export size's pixels, and TensorFlow does not
check that it gets it: ``--export_size=100000,100000`` was a segmentation fault (exit
139), with the export's staging folder left behind. What grows, measured with TF 2.21 on
the CPU (docs/export.md#how-large-an-export-size-fits):

- Freezing the serving graph (``convert_variables_to_constants_v2``, before the
  converter proper) runs Grappler, whose item builder feeds each placeholder a tensor
  of its full shape, allocated and filled: the uint8 image [1, H, W, 3], 3 bytes a
  pixel. Peak memory over a 64x64 export: +0.8 GiB at 16384x16384, +3.1 at 32768x32768,
  +6.2 at 46336x46336, +11.8 at 63664x63664 (3.1 bytes a pixel, whatever the model;
  63664x63664, the largest this rule allowed there, converted, in 26 s); at
  100000x100000 (28 GiB, more than the 22 GiB the machine had free) the allocation
  failed unchecked: the segfault.
  The converter itself (MLIR) allocates nothing per pixel (+0.1 GiB over the freeze).
- int8 calibration runs the model at that size in TFLite's interpreter: its
  activations, 176 to 189 bytes a pixel at width 0.125 (peak memory between 512x512,
  1024x1024 and 3072x3072) and 326 at width 1.0 (256x256 to 768x768), which the serving
  graph's peak of live tensors, traced at that size and not run (``peak_live_bytes``),
  puts at 152 and 324.

The rule: those bytes take at most half of the memory available now (``SHARE``): the
other half is for what they leave out, the process's own growth while converting (the
frozen graph's copy of the weights, the converter's), other processes, and the
estimate's error (up to 189 measured for 152 estimated above). And each side fits an int32:
the .tflite stores a tensor's dimensions so.
"""

import math

from tfseg.data.footprint import cgroup_available, format_bytes, mem_available
from tfseg.errors import InputError

# Grappler's stand-in for the uint8 RGB input, allocated while the graph is frozen.
INPUT_BYTES_PER_PIXEL = 3
# The share of the memory available that the size-dependent bytes may take (see above).
SHARE = 0.5
# The largest tensor dimension a .tflite can store (its shapes are int32 vectors).
MAX_SIDE = 2**31 - 1


def available_bytes():
    """The memory this process may still take: MemAvailable, or a container's limit less
    its use where that is less; None where neither can be read (not Linux)."""
    known = [n for n in (mem_available(), cgroup_available()) if n is not None]
    return min(known) if known else None


def peak_live_bytes(graph):
    """The most bytes that the outputs of ``graph``'s ops (in its order, which is a
    topological one) hold at once, each alive from its op to its last reader; constants
    and variables left out. TFLite's interpreter plans its activations' memory so, one
    buffer per tensor while it is alive."""
    last_use = {}
    ops = graph.get_operations()
    for index, op in enumerate(ops):
        for tensor in op.inputs:
            last_use[tensor.ref()] = index
    alive, peak = {}, 0
    for index, op in enumerate(ops):
        if op.type not in ("Const", "VarHandleOp", "ReadVariableOp"):
            for tensor in op.outputs:
                if tensor.shape.is_fully_defined() and tensor.dtype.size:
                    alive[tensor.ref()] = (tensor.shape.num_elements() * tensor.dtype.size,
                                           last_use.get(tensor.ref(), index))
        peak = max(peak, sum(size for size, _ in alive.values()))
        alive = {ref: entry for ref, entry in alive.items() if entry[1] > index}
    return peak


def largest_size(size, per_pixel, budget, multiple=1):
    """The largest (height, width) of ``size``'s shape whose ``per_pixel`` bytes a pixel
    stay within ``budget`` bytes, each side a multiple of ``multiple`` (at least one)."""
    scale = math.sqrt(budget / per_pixel / (size[0] * size[1]))
    return tuple(max(int(n * scale) // multiple, 1) * multiple for n in size)


def require_fits(size, per_pixel, multiple=1, available=None):
    """Refuses an export ``size`` whose conversion would not fit: ``per_pixel`` bytes a
    pixel (``INPUT_BYTES_PER_PIXEL``, or int8 calibration's activations) over ``SHARE``
    of the ``available`` bytes (default: ``available_bytes()``), or a side over
    ``MAX_SIDE``.

    Raises:
      InputError: one line naming --export_size, what it would need and the largest
        size of its shape (sides multiples of ``multiple``) that fits.
    """
    height, width = size
    given = f"--export_size: {height},{width}"
    if max(size) > MAX_SIDE:
        raise InputError(f"{given}: a .tflite stores each side as an int32, at most "
                         f"{MAX_SIDE}")
    available = available_bytes() if available is None else available
    if available is None:
        return
    needed, budget = height * width * per_pixel, available * SHARE
    if needed > budget:
        largest = largest_size(size, per_pixel, budget, multiple)
        raise InputError(f"{given} would take about {format_bytes(needed)} to convert "
                         f"({per_pixel:.0f} bytes a pixel), over half of the "
                         f"{format_bytes(available)} of memory available here; the largest "
                         f"of its shape that fits is {largest[0]},{largest[1]}")
