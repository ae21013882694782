"""Ops that keep only their input, with the activation before them (and a zero
padding, and a channel scale) taken in and run again in the backward pass:
`lean_conv` and `lean_max_pool`. The memory-saving twins of `fused_conv` are
built on them.
"""

import tensorflow as tf

from tfseg.layers.dilated import accumulator
from tfseg.layers.gating import gated


class _Input:
    """pad(activation(x) [* scale]): made in the forward pass without being kept, and
    again in the backward pass from x once dy exists; then the gradient back through
    it. `activation`, `scale`, `pad`: as `lean_conv`'s."""

    def __init__(self, activation, pad, scale=None):
        self.activation = activation
        self.act = tf.nn.relu if activation == "relu" else activation
        self.pad, self.scale = pad, scale

    def prepare(self, x):
        self.activated = self.act(x) if self.act else x
        t = self.activated * self.scale if self.scale is not None else self.activated
        return tf.pad(t, [[0, 0], *self.pad, [0, 0]]) if self.pad is not None else t

    def again(self, x, dy):
        """The prepared input again, from x gated on dy: without the gate TF runs the
        activation, and keeps its output, during the forward pass."""
        self.x = x
        self.gated = gated(x, dy)
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

    @tf.custom_gradient
    def forward(x, kernel, *scale):
        xs, ks = tf.stop_gradient(x), tf.stop_gradient(kernel)
        ss = tf.stop_gradient(scale[0]) if scale else None
        y = conv(_Input(activation, pad, ss).prepare(xs), ks)

        def backward(dy):
            with tf.name_scope(name or "lean_conv"):
                rebuilt = _Input(activation, pad, ss)
                prepared = rebuilt.again(xs, dy)
                if input_grad is not None:
                    d_kernel = filter_grad(prepared, tf.shape(ks), dy)
                    # After the filter gradient: act(x) is then free before the input
                    # gradient and the activation's own are made (TF ran them side by side).
                    with tf.control_dependencies([d_kernel]):
                        d_prepared = input_grad(tf.shape(prepared), ks, dy)
                else:
                    with tf.GradientTape() as tape:
                        tape.watch([prepared, ks])
                        y_again = conv(prepared, ks)
                    d_prepared, d_kernel = tape.gradient(y_again, [prepared, ks],
                                                         output_gradients=dy)
                dx, d_scale = rebuilt.gradient(d_prepared)
                return (dx, d_kernel, *d_scale)

        return y, backward

    return forward(x, kernel, *([] if scale is None else [scale]))


def lean_max_pool(x, *, ksize, strides, padding, activation=None, pad=None, name=None):
    """max_pool(pad(activation(x))), keeping only x and its own output (which the
    next layer keeps anyway) for the backward pass: ResNet's stem keeps
    relu(y) and its padded copy otherwise. `ksize`, `strides`: [1, h, w, 1];
    `padding`: "SAME" or "VALID"; the rest as `lean_conv`'s."""

    @tf.custom_gradient
    def forward(x):
        xs = tf.stop_gradient(x)
        y = tf.nn.max_pool2d(_Input(activation, pad).prepare(xs), ksize, strides, padding)

        def backward(dy):
            with tf.name_scope(name or "lean_max_pool"):
                rebuilt = _Input(activation, pad)
                d_prepared = tf.raw_ops.MaxPoolGrad(
                    orig_input=rebuilt.again(xs, dy), orig_output=y, grad=dy, ksize=ksize,
                    strides=strides, padding=padding)
                return rebuilt.gradient(d_prepared)[0]

        return y, backward

    return forward(x)
