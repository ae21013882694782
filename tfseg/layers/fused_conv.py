"""Convolutions that keep only their input: ReLU (and padding) fused into the conv.

A stock `ReLU -> DepthwiseConv2D` (or `-> Conv2D`) keeps relu(x) for the conv's
filter gradient and for ReLU's own gradient. The twins here keep x, the output
of the norm before them, which an output-only norm keeps anyway. So one stored
tensor serves both backward passes. relu(x) (and a dilated depthwise conv's
space-to-batch copy, where TF's form is kept) is rebuilt in the backward pass, once
the output gradient has arrived; a folded zero padding is the kernels' own. Fusing
alone saves nothing in TF; the saving comes with the output-only norms of
`inplace_norm`.
"""

import keras
import tensorflow as tf
from keras import ops

from tfseg.layers import dilated
from tfseg.layers.inplace_norm import _gated


def lean_conv(x, kernel, *, conv, input_grad=None, filter_grad=None, relu=False, pad=None,
              name=None):
    """conv(pad(relu(x)), kernel), keeping only x and kernel for the backward pass.

    Args:
      conv: (inputs, kernel) -> outputs.
      input_grad, filter_grad: the conv's backprop kernels, (prepared input or its
        shape, kernel or its shape, dy) -> gradient; without them the backward
        pass differentiates a recomputed `conv` (dilated convs, whose gradient
        TF builds from space-to-batch).
      relu: apply ReLU first; its gradient masks where x <= 0 (`ReluGrad`).
      pad: explicit [[top, bottom], [left, right]] zero padding.
      name: the name scope of the backward pass's ops (the tape calls it outside
        the layer's), e.g. the layer's name, so memory reports can attribute them.
    """

    def prepare(t):
        t = tf.nn.relu(t) if relu else t
        return tf.pad(t, [[0, 0], *pad, [0, 0]]) if pad is not None else t

    @tf.custom_gradient
    def forward(x, kernel):
        xs, ks = tf.stop_gradient(x), tf.stop_gradient(kernel)
        y = conv(prepare(xs), ks)

        def backward(dy):
            with tf.name_scope(name or "lean_conv"):
                prepared = prepare(_gated(xs, dy))
                if input_grad is not None:
                    d_kernel = filter_grad(prepared, tf.shape(ks), dy)
                    # After the filter gradient: relu(x) is then free before the input
                    # gradient and its ReLU mask are made (TF ran them side by side).
                    with tf.control_dependencies([d_kernel]):
                        d_prepared = input_grad(tf.shape(prepared), ks, dy)
                else:
                    with tf.GradientTape() as tape:
                        tape.watch([prepared, ks])
                        y_again = conv(prepared, ks)
                    d_prepared, d_kernel = tape.gradient(y_again, [prepared, ks],
                                                         output_gradients=dy)
                if pad is not None:
                    shape = tf.shape(xs)
                    d_prepared = d_prepared[:, pad[0][0]:pad[0][0] + shape[1],
                                            pad[1][0]:pad[1][0] + shape[2]]
                if relu:
                    d_prepared = tf.raw_ops.ReluGrad(gradients=d_prepared, features=xs)
                return d_prepared, d_kernel

        return y, backward

    return forward(x, kernel)


def _finish(layer, outputs):
    if layer.use_bias:
        outputs = ops.add(outputs, ops.cast(layer.bias, layer.compute_dtype))
    return layer.activation(outputs) if layer.activation is not None else outputs


def _depthwise(layer, inputs, relu, pad):
    strides = [1, *layer.strides, 1]
    padding = layer.padding.upper()
    kernel = ops.cast(layer.kernel, layer.compute_dtype)
    if dilated.usable(layer, inputs.shape):
        return _finish(layer, _shifted_depthwise(layer, inputs, kernel, relu, pad))
    if pad is not None and padding == "VALID" and tuple(layer.dilation_rate) == (1, 1):
        # A folded ZeroPadding2D as the kernels' explicit padding: no padded copy is
        # made, and the input gradient needs no slicing out of a padded one.
        explicit, padding = [0, 0, *pad[0], *pad[1], 0, 0], "EXPLICIT"
        pad = None
    else:
        explicit = []

    def conv(t, k):
        if padding == "EXPLICIT":
            return tf.raw_ops.DepthwiseConv2dNative(
                input=t, filter=k, strides=strides, padding=padding, explicit_paddings=explicit)
        return tf.nn.depthwise_conv2d(t, k, strides, padding, dilations=layer.dilation_rate)

    def input_grad(shape, k, dy):
        return tf.raw_ops.DepthwiseConv2dNativeBackpropInput(
            input_sizes=shape, filter=k, out_backprop=dy, strides=strides, padding=padding,
            explicit_paddings=explicit)

    def filter_grad(t, shape, dy):
        return tf.raw_ops.DepthwiseConv2dNativeBackpropFilter(
            input=t, filter_sizes=shape, out_backprop=dy, strides=strides, padding=padding,
            explicit_paddings=explicit)

    # Dilated where the shifted taps do not apply or pay: TF's space-to-batch form.
    grads = {} if tuple(layer.dilation_rate) != (1, 1) else dict(input_grad=input_grad,
                                                                 filter_grad=filter_grad)
    return _finish(layer, lean_conv(inputs, kernel, conv=conv, relu=relu, pad=pad,
                                    name=layer.name, **grads))


def _shifted_depthwise(layer, inputs, kernel, relu, pad):
    """A dilated depthwise conv without space-to-batch (`tfseg.layers.dilated`)."""
    rate, kernel_hw = tuple(layer.dilation_rate), tuple(layer.kernel_size)
    pads = ([(0, 0), (0, 0)] if layer.padding == "valid"
            else dilated.same_pads(kernel_hw, rate))
    if pad is not None:  # a folded ZeroPadding2D adds to the conv's own
        pads = [(a + p[0], b + p[1]) for (a, b), p in zip(pads, pad)]
    in_hw = tuple(inputs.shape[1:3])

    return lean_conv(
        inputs, kernel, relu=relu, name=layer.name,
        conv=lambda t, k: dilated.depthwise(t, k, rate, pads),
        input_grad=lambda shape, k, dy: dilated.input_grad(dy, k, rate, pads, in_hw),
        filter_grad=lambda t, shape, dy: dilated.filter_grad(t, dy, kernel_hw, rate, pads))


def _channels_last(layer):
    if layer.data_format != "channels_last":
        raise ValueError(f"{layer.name}: {type(layer).__name__} needs channels_last")


@keras.saving.register_keras_serializable(package="tfseg")
class ReluDepthwiseConv2D(keras.layers.DepthwiseConv2D):
    """Drop-in twin of `ReLU` [-> `ZeroPadding2D`] -> `keras.layers.DepthwiseConv2D`.

    Same arguments and variables as the depthwise layer it replaces, plus
    `input_padding` ((top, bottom), (left, right)): the zero padding of a
    `ZeroPadding2D` in front of it, folded in so its padded copy is not kept.
    Keeps only its input. Shapes: [N, H, W, C] -> [N, H', W', C * depth_multiplier].
    """

    def __init__(self, *args, input_padding=None, **kwargs):
        super().__init__(*args, **kwargs)
        _channels_last(self)
        self.input_padding = None if input_padding is None else tuple(map(tuple, input_padding))

    def call(self, inputs):
        pad = None if self.input_padding is None else [list(p) for p in self.input_padding]
        return _depthwise(self, inputs, relu=True, pad=pad)

    def compute_output_shape(self, input_shape):
        if self.input_padding is not None:
            (t, b), (l, r) = self.input_padding
            n, h, w, c = input_shape
            input_shape = (n, h and h + t + b, w and w + l + r, c)
        return super().compute_output_shape(input_shape)

    def get_config(self):
        return {**super().get_config(), "input_padding": self.input_padding}


@keras.saving.register_keras_serializable(package="tfseg")
class LeanDepthwiseConv2D(keras.layers.DepthwiseConv2D):
    """Drop-in twin of a dilated `keras.layers.DepthwiseConv2D` that keeps only its
    input, not the padded space-to-batch copy TF's dilated conv keeps (4.8x the
    input at ASPP's rate 18 on 33x33). Where that copy would be at least twice the
    input, it makes none at all (`tfseg.layers.dilated`). Same arguments and variables.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _channels_last(self)

    def call(self, inputs):
        return _depthwise(self, inputs, relu=False, pad=None)


@keras.saving.register_keras_serializable(package="tfseg")
class ReluConv2D(keras.layers.Conv2D):
    """Drop-in twin of `ReLU` -> `keras.layers.Conv2D` (groups=1) that keeps the
    pre-ReLU input instead of the ReLU output. Same arguments and variables as
    the conv. Shapes: [N, H, W, C] -> [N, H', W', filters].
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _channels_last(self)
        if self.groups != 1:
            raise ValueError(f"{self.name}: ReluConv2D needs groups=1")

    def call(self, inputs):
        strides = [1, *self.strides, 1]
        padding = self.padding.upper()
        dilations = [1, *self.dilation_rate, 1]

        def conv(t, k):
            return tf.nn.conv2d(t, k, strides, padding, dilations=dilations)

        def input_grad(shape, k, dy):
            return tf.raw_ops.Conv2DBackpropInput(
                input_sizes=shape, filter=k, out_backprop=dy, strides=strides, padding=padding,
                dilations=dilations)

        def filter_grad(t, shape, dy):
            return tf.raw_ops.Conv2DBackpropFilter(
                input=t, filter_sizes=shape, out_backprop=dy, strides=strides, padding=padding,
                dilations=dilations)

        kernel = ops.cast(self.kernel, self.compute_dtype)
        grads = {}
        if tuple(self.dilation_rate) == (1, 1):
            grads = dict(input_grad=input_grad, filter_grad=filter_grad)
        return _finish(self, lean_conv(inputs, kernel, conv=conv, relu=True, name=self.name,
                                       **grads))
