"""A dilated depthwise conv (stride 1) as shifted multiply-adds, with no space-to-batch.

TF runs a dilated depthwise conv as SpaceToBatchND -> depthwise -> BatchToSpaceND.
The space-to-batch copy is padded up to a multiple of the rate: at ASPP's rate 18
on a 33x33 feature map it is 72x72, 4.8x the input, and its gradient as large
again. TF's CPU kernels take no dilation in `DepthwiseConv2dNative` nor in a
grouped filter gradient, so the taps are summed here one at a time instead:

    out[o] = sum_t x[o + offset_t] * k_t        (x read as 0 outside its extent)

Each tap takes the part of x that lands inside the output, pads it to the
output's size and multiplies it; the working set is about three output-sized
tensors. The input gradient is the same sum over dy with negated offsets, and
each tap's filter gradient is a reduction of dy * x over the overlap. Half-precision
sums (all three) run in float32, as TF's kernels accumulate (oneDNN's and cuDNN's;
TF's own CPU kernels keep bfloat16 in bfloat16), rounding once at the end; on large
maps they go a quarter of the channels at a time (`HALF_CHUNKS`), so that their
float32 working set is smaller than a half-precision sum over all channels would be.
Each term waits for the previous one (a control dependency), so TF's executor does
not make all taps' temporaries at once. Shapes: [N, H, W, C] -> [N, H', W', C];
spatial sizes must be static.
"""

import tensorflow as tf


# Below this copy ratio, TF's space-to-batch form is kept, per device type: its copy is
# small, and on the CPU its kernel 2-3x faster than the shifted taps (measured fwd + bwd:
# rate 2 at 33x33x1536, rate 6 at 64x128x2048); at rate 18 on 33x33 the taps are as
# fast. The GPU's entry is the CPU's until `benchmarks/dilated.py` has run on one: its
# figures set it (docs/memory-saving.md, "The dilated depthwise path").
MIN_COPY_RATIO = {"CPU": 2.0, "GPU": 2.0}


def device_type():
    """"GPU" where TensorFlow sees one (the step runs there), else "CPU"."""
    return "GPU" if tf.config.list_logical_devices("GPU") else "CPU"


# Half-precision sums run in float32, over this many chunks of the channels one after
# another: a float32 running sum and term of a quarter of the channels take less than
# half-precision ones of all channels would. Only where one example's output is at
# least MIN_CHUNKED_BYTES: below, the chunks' 4x ops cost more (tracing, launches)
# than their memory saves.
HALF_CHUNKS = 4
MIN_CHUNKED_BYTES = 1 << 20


def copy_ratio(in_hw, kernel_hw, dilation_rate, padding):
    """How many times the input's size TF's space-to-batch copy is: the padded input
    rounded up to a multiple of the rate (ASPP's rate 18 at 33x33: 72x72, 4.8x)."""
    ratio = 1.0
    for n, k, d in zip(in_hw, kernel_hw, dilation_rate):
        padded = n + (d * (k - 1) if padding == "same" else 0)
        ratio *= -(-padded // d) * d / n
    return ratio


def usable(layer, shape, min_copy_ratio=None):
    """True where the shifted form applies and pays: `layer` (a DepthwiseConv2D) runs
    at stride 1, dilated, depth multiplier 1, on a static size, and TF's copy would
    be at least `min_copy_ratio` (default: `MIN_COPY_RATIO` of this process's
    `device_type()`) times its input."""
    if (tuple(layer.strides) != (1, 1) or tuple(layer.dilation_rate) == (1, 1)
            or layer.depth_multiplier != 1 or None in tuple(shape[1:3])):
        return False
    if min_copy_ratio is None:
        min_copy_ratio = MIN_COPY_RATIO[device_type()]
    return copy_ratio(shape[1:3], layer.kernel_size, layer.dilation_rate,
                      layer.padding) >= min_copy_ratio


def offsets(kernel_hw, dilation_rate, pads):
    """Each tap's (i, j) and its (row, column) offset into the input."""
    (kh, kw), (dh, dw), ((top, _), (left, _)) = kernel_hw, dilation_rate, pads
    return [((i, j), (i * dh - top, j * dw - left)) for i in range(kh) for j in range(kw)]


def same_pads(kernel_hw, dilation_rate):
    """TF's "SAME" padding at stride 1: the extra row/column goes at the bottom/right."""
    pads = []
    for k, d in zip(kernel_hw, dilation_rate):
        total = d * (k - 1)
        pads.append((total // 2, total - total // 2))
    return pads


def output_hw(in_hw, kernel_hw, dilation_rate, pads):
    return [n + sum(p) - d * (k - 1) for n, k, d, p in zip(in_hw, kernel_hw, dilation_rate, pads)]


def _overlap(size, out_size, offset):
    """Output rows [lo, hi) whose source row o + offset lies inside [0, size)."""
    return max(0, -offset), min(out_size, size - offset)


def _channel_chunks(t, out_hw):
    """[(c0, c1)]: the channel ranges a sum over `t` [N, H, W, C] into an output of
    `out_hw` goes in, one after another."""
    channels = t.shape[3]
    chunked = (accumulator(t.dtype) != t.dtype
               and out_hw[0] * out_hw[1] * channels * t.dtype.size >= MIN_CHUNKED_BYTES)
    n = min(channels, HALF_CHUNKS) if chunked else 1
    bounds = [channels * i // n for i in range(n + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def _shift_sum(src, weights, shifts, out_hw):
    """sum_t pad(src[o + shift_t]) * weights[t] over the output's extent.

    Half-precision terms are summed in float32 (`accumulator`), on large maps a chunk
    of channels at a time, and rounded once; the product of two half-precision numbers
    is exact in float32. Each tap's slice is padded in src's dtype and cast after it,
    so the float32 temporaries are one term and the running sum."""
    acc = accumulator(src.dtype)
    parts, previous = [], []
    for c0, c1 in _channel_chunks(src, out_hw):
        total = None
        for w, (a, b) in zip(weights, shifts):
            y0, y1 = _overlap(src.shape[1], out_hw[0], a)
            x0, x1 = _overlap(src.shape[2], out_hw[1], b)
            if y1 <= y0 or x1 <= x0:
                continue  # the tap falls wholly in the padding
            with tf.control_dependencies(previous):
                term = tf.pad(src[:, y0 + a:y1 + a, x0 + b:x1 + b, c0:c1],
                              [[0, 0], [y0, out_hw[0] - y1], [x0, out_hw[1] - x1], [0, 0]])
                whole = (c0, c1) == (0, src.shape[3])
                term = tf.cast(term, acc) * tf.cast(w if whole else w[c0:c1], acc)
                total = term if total is None else total + term
            previous = [total]
        if total is None:
            return tf.zeros([tf.shape(src)[0], *out_hw, src.shape[3]], src.dtype)
        parts.append(tf.cast(total, src.dtype))
        previous = [parts[-1]]  # the next chunk's float32 sum waits for this one's end
    return parts[0] if len(parts) == 1 else tf.concat(parts, axis=3)


def _taps(kernel, dilation_rate, pads):
    """([each tap's per-channel weights], [its offset]) of a [kh, kw, C, 1] kernel."""
    (kh, kw), taps = kernel.shape[:2], offsets(kernel.shape[:2], dilation_rate, pads)
    # One unstack, where a slice per tap would add four ops each.
    weights = tf.unstack(tf.reshape(kernel, [kh * kw, kernel.shape[2]]))
    return [weights[i * kw + j] for (i, j), _ in taps], [shift for _, shift in taps]


def depthwise(x, kernel, dilation_rate, pads):
    """Dilated depthwise conv of x [N, H, W, C] with kernel [kh, kw, C, 1], explicit pads."""
    weights, shifts = _taps(kernel, dilation_rate, pads)
    return _shift_sum(x, weights, shifts,
                      output_hw(x.shape[1:3], kernel.shape[:2], dilation_rate, pads))


def input_grad(dy, kernel, dilation_rate, pads, in_hw):
    """d depthwise / d x: the taps' sum over dy, shifted back."""
    weights, shifts = _taps(kernel, dilation_rate, pads)
    return _shift_sum(dy, weights, [(-a, -b) for a, b in shifts], in_hw)


def accumulator(dtype):
    """The dtype a sum over an activation of `dtype` runs in: float32 for half types.
    TF's `Sum` kernels accumulate in the input's dtype on some devices (float16 on the
    CPU: a sum of 10^4 terms near 1.5 comes out 73% low), where its conv gradient
    kernels accumulate in float32."""
    return tf.float32 if dtype in (tf.float16, tf.bfloat16) else dtype


def filter_grad(x, dy, kernel_hw, dilation_rate, pads):
    """d depthwise / d kernel: per tap, dy * x summed over the overlap and the batch.

    Summed in float32 for half-precision x and dy (`accumulator`), rounded to their
    dtype once at the end. Each tap's slices are cast before they are multiplied: the
    product of two half-precision numbers is exact in float32, where one rounded to
    bfloat16 is off by up to 2^-9 per term. Half-precision products go a chunk of
    channels at a time (`HALF_CHUNKS`), as `_shift_sum`'s sums do."""
    grads, previous = {}, []
    acc = accumulator(dy.dtype)
    out_hw = output_hw(x.shape[1:3], kernel_hw, dilation_rate, pads)
    chunks = _channel_chunks(dy, out_hw)
    for (i, j), (a, b) in offsets(kernel_hw, dilation_rate, pads):
        y0, y1 = _overlap(x.shape[1], out_hw[0], a)
        x0, x1 = _overlap(x.shape[2], out_hw[1], b)
        if y1 <= y0 or x1 <= x0:
            grads[i, j] = tf.zeros_like(dy[0, 0, 0], acc)
            continue
        parts = []
        for c0, c1 in chunks:
            with tf.control_dependencies(previous):
                parts.append(tf.reduce_sum(
                    tf.cast(dy[:, y0:y1, x0:x1, c0:c1], acc)
                    * tf.cast(x[:, y0 + a:y1 + a, x0 + b:x1 + b, c0:c1], acc), axis=[0, 1, 2]))
            previous = parts[-1:]
        grads[i, j] = parts[0] if len(parts) == 1 else tf.concat(parts, axis=0)
    rows = [tf.stack([grads[i, j] for j in range(kernel_hw[1])]) for i in range(kernel_hw[0])]
    return tf.cast(tf.stack(rows)[..., None], dy.dtype)
