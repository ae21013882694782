"""The depthwise conv's forms, timed alone: forward and backward at the network's shapes.

    python benchmarks/dilated.py                    # on a GPU: ASPP's and the backbone's shapes
    python benchmarks/dilated.py --cpu              # tiny shapes on the CPU (a dry run)

A separable ASPP branch's depthwise conv (3x3, rates 6, 12 and 18, stride 1, "same") runs
on the backbone's output: 2048 channels at 64x128 for a 1024x2048 image at output stride
16, batch 1, and at 33x33 for 513x513, batch 2. The backbone's (rate 1; rate 2 in the
exit flow's last block at output stride 16) run at 1024x2048 on 128 channels at
512x1024 to 1536 at 64x128; the 48 of the middle flow on 728 at 64x128. Forms:

- `space_to_batch`: stock Keras' `DepthwiseConv2D`: TensorFlow's DepthwiseConv2dNative
  kernels (which on a GPU use cuDNN only for half precision in NCHW), dilated by
  SpaceToBatchND -> depthwise -> BatchToSpaceND;
- `taps`: tfseg's twin (`tfseg.layers.dilated`, as `LeanDepthwiseConv2D` runs it), nine
  shifted multiply-adds and no space-to-batch copy (dilated rows only);
- `grouped`: the same conv as a grouped `Conv2D` (one group per channel, the kernel
  reshaped to [3, 3, 1, C]), dilated by the conv itself: on a GPU, cuDNN's grouped
  convolution in float32 too, and no space-to-batch copy;
- `xla`: stock's form compiled by XLA (`jit_compile=True`).

Each form's step is one forward pass and the gradients of the input and the kernel for a
fixed output gradient, in a `tf.function`; the time is the median of `--steps` calls
after two warm-up calls, each call ended by reading one value of its result (a device
sync); each form's gradients are compared with the first form's (`grad_difference`); a
form TensorFlow has no kernel for here is a row's `{"error": ...}`. On
a GPU the allocator's peak over the call is read too. `copy_ratio` is the space-to-batch
copy's size over the input's (`tfseg.layers.dilated.copy_ratio`): the rewrite takes the
taps where it is at least the device's `MIN_COPY_RATIO`. Prints a table (a line per row
as it is measured) and one JSON line; bad arguments: one line, exit 2.
"""

import json
import os
import statistics
import sys
import time

import refusal  # beside this file
from tfseg.units import MIB

# (label, (batch, height, width, channels) of the conv's input, rates), ASPP's first, and
# the dry run's stand-ins.
SHAPES = (("aspp 1024x2048 b1", (1, 64, 128, 2048), (6, 12, 18)),
          ("aspp 513x513 b2", (2, 33, 33, 2048), (6, 12, 18)),
          ("entry 1024x2048 b1", (1, 512, 1024, 128), (1,)),
          ("entry 1024x2048 b1", (1, 256, 512, 256), (1,)),
          ("entry 1024x2048 b1", (1, 128, 256, 728), (1,)),
          ("middle 1024x2048 b1", (1, 64, 128, 728), (1,)),
          ("exit 1024x2048 b1", (1, 64, 128, 1536), (2,)))
CPU_SHAPES = (("aspp 1024x2048 b1", (1, 9, 17, 8), (2, 3)),
              ("aspp 513x513 b2", (2, 7, 7, 8), (2, 3)),
              ("middle 1024x2048 b1", (1, 9, 17, 8), (1,)))
FORMS = ("space_to_batch", "taps", "grouped", "xla")


def step_fn(form, layer):
    """f(x, dy) -> (y's first value, dx, dkernel) of one form, as a tf.function; `layer`
    is a built stock `DepthwiseConv2D` whose settings and kernel every form uses."""
    import tensorflow as tf

    from tfseg.layers.fused_conv import shifted_depthwise

    def forward(x):
        if form == "taps":
            return shifted_depthwise(layer, x, layer.kernel)
        if form == "grouped":  # [3, 3, C, 1] -> [3, 3, 1, C]: channel c is group c's filter
            kernel = tf.reshape(layer.kernel, (*layer.kernel_size, 1, -1))
            return tf.nn.conv2d(x, kernel, 1, layer.padding.upper(),
                                dilations=layer.dilation_rate)
        return layer(x)

    def step(x, dy):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = forward(x)
        dx, dk = tape.gradient(y, [x, layer.kernel], output_gradients=dy)
        return y[0, 0, 0, 0], dx, dk

    return tf.function(step, jit_compile=form == "xla")


def layer_for(rate, channels):
    """A built stock 3x3 `DepthwiseConv2D` at `rate`, "same", no bias (ASPP's), with
    the same kernel for every form."""
    import keras
    import tensorflow as tf

    layer = keras.layers.DepthwiseConv2D(kernel_size=3, dilation_rate=rate, padding="same",
                                         use_bias=False)
    layer.build((None, None, None, channels))
    layer.kernel.assign(tf.random.stateless_normal(layer.kernel.shape, (5, 6)) / 3.0)
    return layer


def peak_bytes():
    """The GPU allocator's peak since its last reset, or None (the CPU)."""
    import tensorflow as tf

    if not tf.config.list_logical_devices("GPU"):
        return None
    return tf.config.experimental.get_memory_info("GPU:0")["peak"]


def time_form(form, shape, rate, steps):
    """{"seconds": median, "peak_mib": ...} of one form at one shape and rate."""
    import tensorflow as tf

    _, height, width, channels = shape
    layer = layer_for(rate, channels)
    x = tf.random.stateless_normal(shape, (1, 2))
    dy = tf.random.stateless_normal(shape, (3, 4))
    fn = step_fn(form, layer)
    try:
        for _ in range(2):
            result = fn(x, dy)
            float(result[0])
    except (tf.errors.UnimplementedError, tf.errors.InvalidArgumentError) as error:
        # TF's CPU kernels without oneDNN have no dilated grouped conv gradient.
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        return {"error": lines[-2] if len(lines) > 1 else lines[0]}  # the line before "[["
    gpu = bool(tf.config.list_logical_devices("GPU"))
    if gpu:
        tf.config.experimental.reset_memory_stats("GPU:0")
        base = tf.config.experimental.get_memory_info("GPU:0")["current"]
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        float(fn(x, dy)[0])
        times.append(time.perf_counter() - start)
    out = {"seconds": statistics.median(times), "grads": [t.numpy() for t in result[1:]]}
    if gpu:
        out["peak_mib"] = round((peak_bytes() - base) / MIB, 1)
    return out


def difference(forms):
    """{form: the largest relative difference of its input and kernel gradients from the
    first form's} (each popped from `forms`' results): the forms compute one thing."""
    first = None
    out = {}
    for name, result in forms.items():
        if "error" in result:
            continue
        grads = result.pop("grads")
        if first is None:
            first = grads
        out[name] = max(float(abs(g - f).max() / max(abs(f).max(), 1e-30))
                        for g, f in zip(grads, first))
    return out


def parse(argv):
    parser = refusal.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu", action="store_true", help="tiny shapes on the CPU")
    parser.add_argument("--steps", type=int, default=10, help="timed calls per form (median)")
    parser.add_argument("--forms", default=",".join(FORMS))
    parser.add_argument("--out", help="append the JSON line to this file too")
    args = parser.parse_args(argv)
    args.forms = tuple(f for f in args.forms.split(",") if f)
    bad = [f for f in args.forms if f not in FORMS]
    if bad or not args.forms:
        parser.error(f"--forms: any of {','.join(FORMS)}, got {','.join(bad) or 'none'}")
    if args.steps < 1:
        parser.error(f"--steps: at least 1, got {args.steps}")
    return args


def main(argv=None):
    args = parse(argv)
    if args.cpu:
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    device = refusal.quiet_tensorflow()
    from tfseg.layers import dilated

    rows = []
    print(device)
    print(f"{'shape':<20}{'input':>16}{'rate':>5}{'copy_ratio':>11}"
          + "".join(f"{f:>16}" for f in args.forms))
    for label, shape, rates in (CPU_SHAPES if args.cpu else SHAPES):
        for rate in rates:
            ratio = dilated.copy_ratio(shape[1:3], (3, 3), (rate, rate), "same")
            # The taps are the dilated twin's: an undilated conv has no copy to avoid.
            forms = {f: time_form(f, shape, rate, args.steps) for f in args.forms
                     if f != "taps" or rate > 1}
            row = {"shape": label, "input": shape, "rate": rate, "copy_ratio": round(ratio, 2),
                   "forms": forms, "grad_difference": difference(forms)}
            cells = [f"{forms[f]['seconds'] * 1e3:>13.2f} ms" if "seconds" in forms.get(f, {})
                     else f"{'-' if f not in forms else 'fails':>16}" for f in args.forms]
            dims = "x".join(str(d) for d in shape)
            print(f"{label:<20}{dims:>16}{rate:>5}{ratio:>11.2f}" + "".join(cells), flush=True)
            rows.append(row)
    summary = {"device": device, "steps": args.steps, "rows": rows,
               "min_copy_ratio": dilated.MIN_COPY_RATIO}
    line = json.dumps(summary)
    print(line)
    if args.out:
        with open(args.out, "a") as f:
            f.write(line + "\n")
    return summary


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
