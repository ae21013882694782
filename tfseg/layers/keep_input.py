"""Ops that keep only their input, with the activation before them (and a zero
padding, and a channel scale) taken in and run again in the backward pass:
`lean_conv`, `lean_max_pool` and `lean_avg_pool`. The memory-saving twins of
`fused_conv` are built on them.

Their input may be a list of parts, concatenated on channels before the activation
(Inception's blocks: each branch's norm -> ReLU, concatenated, read by the next
block's convs and pools). They then keep the parts, which the norms making them keep
anyway, and make the concatenation only while they run: never kept, in either pass.
"""

import tensorflow as tf

from tfseg.layers.dilated import accumulator
from tfseg.layers.gating import gated


def joined(parts):
    """The concatenation on channels of a list of parts (the one part itself)."""
    return parts[0] if len(parts) == 1 else tf.concat(parts, -1)


def joined_shape(shapes):
    """The shape of `joined` parts of `shapes` (a list of [N, H, W, C_i])."""
    shapes = [tuple(s) for s in shapes]
    channels = [s[-1] for s in shapes]
    return (*shapes[0][:-1], None if None in channels else sum(channels))


def gated_parts(parts, dy):
    """`parts`, usable only once `dy` exists (`gated`): under XLA, which drops control
    dependencies, the first carries the data dependency, which holds back their
    concatenation, and no full-size add is made for the others."""
    with tf.control_dependencies([dy]):
        rest = [tf.identity(p) for p in parts[1:]]
    return [gated(parts[0], dy), *rest]


def split(gradient, parts):
    """`gradient` of `joined(parts)`, as the list of the parts' gradients."""
    if len(parts) == 1:
        return [gradient]
    return tf.split(gradient, [int(p.shape[-1]) for p in parts], axis=-1)


def _parts(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


class _Input:
    """pad(activation(x) [* scale]): made in the forward pass without being kept, and
    again in the backward pass from x (a list of parts, joined) once dy exists; then
    the gradient back through it. `activation`, `scale`, `pad`: as `lean_conv`'s."""

    def __init__(self, activation, pad, scale=None):
        self.activation = activation
        self.act = tf.nn.relu if activation == "relu" else activation
        self.pad, self.scale = pad, scale

    def prepare(self, x):
        x = joined(_parts(x))
        self.activated = self.act(x) if self.act else x
        t = self.activated * self.scale if self.scale is not None else self.activated
        return tf.pad(t, [[0, 0], *self.pad, [0, 0]]) if self.pad is not None else t

    def again(self, x, dy):
        """The prepared input again, from x (each part) gated on dy: without the gate TF
        runs the activation (and the parts' concatenation), and keeps its output,
        during the forward pass."""
        if isinstance(x, (list, tuple)):  # their concatenation then waits for dy too
            self.x = self.gated = joined(gated_parts(x, dy))
        else:
            self.x, self.gated = x, gated(x, dy)
        with tf.GradientTape() as self.tape:
            self.tape.watch(self.gated)
            return self.prepare(self.gated)

    def gradient(self, d_prepared):
        """(dx, [d_scale]) from the gradient of the prepared input."""
        if self.pad is not None:
            shape = tf.shape(self.x)
            d_prepared = d_prepared[:, self.pad[0][0]:self.pad[0][0] + shape[1],
                                    self.pad[1][0]:self.pad[1][0] + shape[2]]
        d_scale = []
        if self.scale is not None:  # as TF's Mul gradient: the sum over the broadcast axes
            # in float32 for half types (`dilated.accumulator`).
            product = d_prepared * self.activated
            d_scale = [tf.cast(tf.reduce_sum(tf.cast(product, accumulator(product.dtype)),
                                             [1, 2], keepdims=True), product.dtype)]
            d_prepared = d_prepared * self.scale
        if self.activation == "relu":
            d_prepared = tf.raw_ops.ReluGrad(gradients=d_prepared, features=self.x)
        elif self.act is not None:
            d_prepared = self.tape.gradient(self.activated, self.gated,
                                            output_gradients=d_prepared)
        return d_prepared, d_scale


def lean_conv(x, kernel, *, conv, input_grad=None, filter_grad=None, activation=None,
              scale=None, pad=None, name=None):
    """conv(pad(activation(x) [* scale]), kernel), keeping only x, kernel [and scale]
    for the backward pass.

    Args:
      kernel: a tensor, or a tuple of them that `conv` takes together (a separable
        conv's depthwise and pointwise kernels); the gradient is one per kernel.
      conv: (inputs, kernel) -> outputs.
      input_grad, filter_grad: the conv's backprop kernels, (prepared input or its
        shape, kernel or its shape, dy) -> gradient; without them the backward
        pass differentiates a recomputed `conv` (dilated convs, whose gradient
        TF builds from space-to-batch).
      activation: None; "relu", whose gradient masks where x <= 0 (`ReluGrad`,
        from x itself); or an elementwise function (`tfseg.layers.elementwise`),
        run again in the backward pass and differentiated there.
      scale: None, or a [N, 1, 1, C] tensor the activation's output is multiplied
        by (squeeze-and-excitation's channel weights): the product is not kept.
      pad: explicit [[top, bottom], [left, right]] zero padding.
      name: the name scope of the backward pass's ops (the tape calls it outside
        the layer's), e.g. the layer's name, so memory reports can attribute them.
    """

    parts = _parts(x)
    n = len(parts)
    kernels = list(kernel) if isinstance(kernel, (list, tuple)) else [kernel]
    m = len(kernels)
    if input_grad is not None and m > 1:
        raise ValueError("lean_conv: input_grad and filter_grad take one kernel")

    @tf.custom_gradient
    def forward(*args):
        xs = [tf.stop_gradient(p) for p in args[:n]]
        kept = [tf.stop_gradient(k) for k in args[n:n + m]]
        ks = tuple(kept) if m > 1 else kept[0]
        ss = tf.stop_gradient(args[n + m]) if len(args) > n + m else None
        y = conv(_Input(activation, pad, ss).prepare(xs), ks)

        def backward(dy):
            with tf.name_scope(name or "lean_conv"):
                rebuilt = _Input(activation, pad, ss)
                prepared = rebuilt.again(xs if n > 1 else xs[0], dy)
                if input_grad is not None:
                    d_kernels = [filter_grad(prepared, tf.shape(ks), dy)]
                    # After the filter gradient: act(x) is then free before the input
                    # gradient and the activation's own are made (TF ran them side by side).
                    with tf.control_dependencies(d_kernels):
                        d_prepared = input_grad(tf.shape(prepared), ks, dy)
                else:
                    with tf.GradientTape() as tape:
                        tape.watch([prepared, *kept])
                        y_again = conv(prepared, ks)
                    d_prepared, *d_kernels = tape.gradient(y_again, [prepared, *kept],
                                                           output_gradients=dy)
                dx, d_scale = rebuilt.gradient(d_prepared)
                return (*split(dx, xs), *d_kernels, *d_scale)

        return y, backward

    return forward(*parts, *kernels, *([] if scale is None else [scale]))


def lean_max_pool(x, *, ksize, strides, padding, activation=None, pad=None, name=None):
    """max_pool(pad(activation(x))), keeping only x and its own output (which the
    next layer keeps anyway) for the backward pass: ResNet's stem keeps
    relu(y) and its padded copy otherwise. `ksize`, `strides`: [1, h, w, 1];
    `padding`: "SAME" or "VALID"; the rest as `lean_conv`'s."""

    parts = _parts(x)

    @tf.custom_gradient
    def forward(*parts):
        xs = [tf.stop_gradient(p) for p in parts]
        y = tf.nn.max_pool2d(_Input(activation, pad).prepare(xs), ksize, strides, padding)

        def backward(dy):
            with tf.name_scope(name or "lean_max_pool"):
                rebuilt = _Input(activation, pad)
                d_prepared = tf.raw_ops.MaxPoolGrad(
                    orig_input=rebuilt.again(xs if len(xs) > 1 else xs[0], dy), orig_output=y,
                    grad=dy, ksize=ksize, strides=strides, padding=padding)
                return split(rebuilt.gradient(d_prepared)[0], xs)

        return y, backward

    return forward(*parts)


def lean_avg_pool(x, *, ksize, strides, padding, activation=None, name=None):
    """avg_pool(activation(x)), keeping only x (a tensor, or a list of parts joined on
    channels) for the backward pass, and that only for the activation's gradient: an
    average's own gradient needs no input. `ksize`, `strides`, `padding`: as
    `lean_max_pool`'s."""
    parts = _parts(x)

    @tf.custom_gradient
    def forward(*parts):
        xs = [tf.stop_gradient(p) for p in parts]
        prepared = _Input(activation, None).prepare(xs)
        y = tf.nn.avg_pool2d(prepared, ksize, strides, padding)
        shape = tf.shape(prepared)

        def backward(dy):
            with tf.name_scope(name or "lean_avg_pool"):
                d_prepared = tf.raw_ops.AvgPoolGrad(orig_input_shape=shape, grad=dy,
                                                    ksize=ksize, strides=strides,
                                                    padding=padding)
                if activation is None:
                    return split(d_prepared, xs)
                if activation == "relu":  # the mask alone: no activation made again
                    x = joined(gated_parts(xs, d_prepared))
                    return split(tf.raw_ops.ReluGrad(gradients=d_prepared, features=x), xs)
                rebuilt = _Input(activation, None)
                rebuilt.again(xs if len(xs) > 1 else xs[0], d_prepared)
                return split(rebuilt.gradient(d_prepared)[0], xs)

        return y, backward

    return forward(*parts)
