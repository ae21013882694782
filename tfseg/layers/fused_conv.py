"""Convolutions that keep only their input: the activation (and padding) before
them fused in.

A stock `ReLU -> DepthwiseConv2D` (or `-> Conv2D`) keeps relu(x) for the conv's
filter gradient and x or relu(x) for ReLU's own gradient; swish, GELU and the other
elementwise activations keep x as well. The twins here keep x, the output of the
norm before them, which an output-only norm keeps anyway. So one stored tensor
serves both backward passes. The activation (and a dilated depthwise conv's
space-to-batch copy, where TF's form is kept) is run again in the backward pass,
once the output gradient has arrived (`keep_input.lean_conv`); a folded zero
padding is the kernels' own. Fusing alone saves nothing in TF; the saving comes
with the output-only norms of `inplace_norm`.
"""

import keras
import tensorflow as tf
from keras import ops

from tfseg.layers import conv_kernels, dilated
from tfseg.layers.elementwise import TakesActivation
from tfseg.layers.keep_input import joined_shape, lean_conv


def _finish(layer, outputs):
    if layer.use_bias:
        outputs = ops.add(outputs, ops.cast(layer.bias, layer.compute_dtype))
    return layer.activation(outputs) if layer.activation is not None else outputs


def _explicit(layer, pad):
    """(padding, explicit_paddings, pad left to make): a folded ZeroPadding2D before a
    'valid' undilated conv is the kernels' explicit padding, so no padded copy is
    made and the input gradient needs no slicing out of a padded one."""
    padding = layer.padding.upper()
    if pad is not None and padding == "VALID" and tuple(layer.dilation_rate) == (1, 1):
        return "EXPLICIT", [0, 0, *pad[0], *pad[1], 0, 0], None
    return padding, [], pad


def _depthwise(layer, inputs, activation, pad, kernel=None):
    """`layer`'s depthwise conv of `inputs`, keeping only them; `kernel` [kh, kw, C, 1]
    where the layer's own is not in that layout (a grouped Conv2D's)."""
    kernel = ops.cast(layer.kernel if kernel is None else kernel, layer.compute_dtype)
    grouped = conv_kernels.grouped(kernel, layer.kernel_form)  # dilated: no copy to avoid
    if (not grouped and isinstance(layer, keras.layers.DepthwiseConv2D)
            and dilated.usable(layer, inputs.shape)):
        return _finish(layer, shifted_depthwise(layer, inputs, kernel, activation, pad))
    padding, explicit, pad = _explicit(layer, pad)
    rates = tuple(layer.dilation_rate)
    form = dict(strides=[1, *layer.strides, 1], padding=padding, explicit=explicit,
                dilations=rates, grouped=grouped)
    # Dilated where the shifted taps do not apply or pay: TF's space-to-batch form,
    # differentiated as TF builds it; the grouped conv has gradient kernels of its own.
    grads = {} if rates != (1, 1) and not grouped else dict(
        input_grad=lambda shape, k, dy: conv_kernels.input_grad(shape, k, dy, **form),
        filter_grad=lambda t, shape, dy: conv_kernels.filter_grad(t, shape, dy, **form))
    return _finish(layer, lean_conv(
        inputs, kernel, conv=lambda t, k: conv_kernels.forward(t, k, **form),
        activation=activation, pad=pad, name=layer.name, **grads))


def shifted_depthwise(layer, inputs, kernel, activation=None, pad=None):
    """`layer`'s dilated depthwise conv (a DepthwiseConv2D's settings) of `inputs` without
    space-to-batch (`tfseg.layers.dilated`), keeping only `inputs` (`lean_conv`); no bias.
    `benchmarks/dilated.py` times it against TF's form."""
    rate, kernel_hw = tuple(layer.dilation_rate), tuple(layer.kernel_size)
    pads = ([(0, 0), (0, 0)] if layer.padding == "valid"
            else dilated.same_pads(kernel_hw, rate))
    if pad is not None:  # a folded ZeroPadding2D adds to the conv's own
        pads = [(a + p[0], b + p[1]) for (a, b), p in zip(pads, pad)]
    in_hw = tuple(inputs.shape[1:3])

    return lean_conv(
        inputs, kernel, activation=activation, name=layer.name,
        conv=lambda t, k: dilated.depthwise(t, k, rate, pads),
        input_grad=lambda shape, k, dy: dilated.input_grad(dy, k, rate, pads, in_hw),
        filter_grad=lambda t, shape, dy: dilated.filter_grad(t, dy, kernel_hw, rate, pads))


def _channels_last(layer):
    if layer.data_format != "channels_last":
        raise ValueError(f"{layer.name}: {type(layer).__name__} needs channels_last")


def _one_shape(shape):
    """Whether `shape` is one shape, not a list of them."""
    return not shape or isinstance(shape[0], (int, type(None)))


class TakesInput(TakesActivation):
    """The conv and pooling twins' own arguments: `input_activation` (`TakesActivation`:
    "relu", a `keras.activations` name, a serialized activation layer or None),
    `input_padding` ((top, bottom), (left, right)): the zero padding of a
    `ZeroPadding2D` in front, folded in so its padded copy is not kept; and
    `input_parts` (the channels of each part, or None): the twin is called on a list
    of maps that a `Concatenate` in front joined (Inception's blocks), and keeps those,
    not the concatenation (`tfseg.layers.keep_input`)."""

    def __init__(self, *args, input_activation="relu", input_padding=None, input_parts=None,
                 **kwargs):
        super().__init__(*args, input_activation=input_activation, **kwargs)
        _channels_last(self)
        self.input_padding = None if input_padding is None else tuple(map(tuple, input_padding))
        self.input_parts = None if input_parts is None else [int(c) for c in input_parts]
        if self.input_parts is not None:
            self.input_spec = None  # a list of maps, not the one map the stock layer checks

    def _pad(self):
        return None if self.input_padding is None else [list(p) for p in self.input_padding]

    def _joined(self, input_shape):
        """The one shape of the joined parts (Keras asks with the list of the parts'
        shapes, the stock build again with the joined one)."""
        if self.input_parts is None or _one_shape(input_shape):
            return input_shape
        return joined_shape(input_shape)

    def build(self, input_shape):
        if self.input_parts is not None and not _one_shape(input_shape):
            given = [shape[-1] for shape in input_shape]
            if given != self.input_parts:
                raise ValueError(f"{self.name}: called on parts of {given} channels; its "
                                 f"input_parts are {self.input_parts}")
        super().build(self._joined(input_shape))
        if self.input_parts is not None:
            self.input_spec = None

    def compute_output_shape(self, input_shape):
        input_shape = self._joined(input_shape)
        if self.input_padding is not None:
            (t, b), (l, r) = self.input_padding
            n, h, w, c = input_shape
            input_shape = (n, h and h + t + b, w and w + l + r, c)
        return super().compute_output_shape(input_shape)

    def get_config(self):
        return {**super().get_config(), "input_padding": self.input_padding,
                "input_parts": self.input_parts}


@keras.saving.register_keras_serializable(package="tfseg")
class ActivationDepthwiseConv2D(conv_kernels.TakesKernelForm, TakesInput,
                                keras.layers.DepthwiseConv2D):
    """Drop-in twin of an elementwise activation [-> `ZeroPadding2D`] ->
    `keras.layers.DepthwiseConv2D` (ReLU, ReLU6, swish, hard-swish, GELU, ...; see
    `tfseg.layers.elementwise`), in either order.

    Same arguments and variables as the depthwise layer it replaces, plus
    `input_activation` and `input_padding` (see `TakesInput`) and `kernel_form`
    (`conv_kernels.TakesKernelForm`). Keeps only its input (the activation's), and
    runs the activation again once the output gradient arrives.
    Shapes: [N, H, W, C] -> [N, H', W', C * depth_multiplier].
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.input_parts is not None:
            raise ValueError(f"{self.name}: {type(self).__name__} takes one input")

    def call(self, inputs):
        return _depthwise(self, inputs, activation=self._input_fn, pad=self._pad())


@keras.saving.register_keras_serializable(package="tfseg")
class ReluDepthwiseConv2D(ActivationDepthwiseConv2D):
    """`ActivationDepthwiseConv2D` with a plain ReLU: the twin of `ReLU`
    [-> `ZeroPadding2D`] -> `DepthwiseConv2D`."""


@keras.saving.register_keras_serializable(package="tfseg")
class LeanDepthwiseConv2D(conv_kernels.TakesKernelForm, keras.layers.DepthwiseConv2D):
    """Drop-in twin of a dilated `keras.layers.DepthwiseConv2D` that keeps only its
    input, not the padded space-to-batch copy TF's dilated conv keeps (4.8x the
    input at ASPP's rate 18 on 33x33). Where that copy would be at least twice the
    input, it makes none at all (`tfseg.layers.dilated`). Same arguments and variables,
    plus `kernel_form` (`conv_kernels.TakesKernelForm`).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _channels_last(self)

    def call(self, inputs):
        return _depthwise(self, inputs, activation=None, pad=None)


@keras.saving.register_keras_serializable(package="tfseg")
class ActivationConv2D(conv_kernels.TakesKernelForm, TakesInput, keras.layers.Conv2D):
    """Drop-in twin of an elementwise activation [-> `ZeroPadding2D`] ->
    `keras.layers.Conv2D` that keeps the activation's input instead of its output, and
    runs the activation again once the output gradient arrives. Groups: 1, or one per
    input channel with one filter each (a depthwise conv, run by the depthwise conv's
    kernels: TensorFlow's CPU kernels have no grouped-conv gradient).
    Same arguments and variables as the conv, plus `input_activation` and
    `input_padding` (see `TakesInput`) and, for the grouped one, `kernel_form`
    (`conv_kernels.TakesKernelForm`). Shapes: [N, H, W, C] -> [N, H', W', filters].

    `scale` (a call argument, [N, 1, 1, C]): the conv's input is
    activation(inputs) * scale, the product a `keras.layers.Multiply` makes in
    squeeze-and-excitation blocks (EfficientNet, MobileNetV3), which is then not kept
    (`tfseg.memory.rewrite` folds such Multiplys in). SENet: Hu et al. 2018,
    https://arxiv.org/abs/1709.01507.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.groups not in (1, self.filters):
            raise ValueError(f"{self.name}: {type(self).__name__} takes groups=1, or "
                             f"groups=filters (a depthwise conv)")

    def call(self, inputs, scale=None):
        if self.groups != 1:
            if scale is not None or inputs.shape[-1] != self.groups or self.input_parts:
                raise ValueError(f"{self.name}: a grouped {type(self).__name__} takes one "
                                 f"map of {self.groups} channels and no scale")
            kernel = ops.reshape(self.kernel, [*self.kernel_size, self.groups, 1])
            return _depthwise(self, inputs, self._input_fn, self._pad(), kernel=kernel)
        strides = [1, *self.strides, 1]
        dilations = [1, *self.dilation_rate, 1]
        padding, explicit, pad = _explicit(self, self._pad())

        def conv(t, k):
            if tuple(self.dilation_rate) != (1, 1):
                # tf.nn.convolution: a dilated Conv2D op has no gradient kernel on the
                # CPU without oneDNN; this one runs it through space-to-batch there.
                return tf.nn.convolution(t, k, strides=self.strides, padding=padding,
                                         dilations=self.dilation_rate)
            return tf.raw_ops.Conv2D(input=t, filter=k, strides=strides, padding=padding,
                                     explicit_paddings=explicit, dilations=dilations)

        def input_grad(shape, k, dy):
            return tf.raw_ops.Conv2DBackpropInput(
                input_sizes=shape, filter=k, out_backprop=dy, strides=strides, padding=padding,
                explicit_paddings=explicit, dilations=dilations)

        def filter_grad(t, shape, dy):
            return tf.raw_ops.Conv2DBackpropFilter(
                input=t, filter_sizes=shape, out_backprop=dy, strides=strides, padding=padding,
                explicit_paddings=explicit, dilations=dilations)

        kernel = ops.cast(self.kernel, self.compute_dtype)
        grads = {}
        if tuple(self.dilation_rate) == (1, 1):
            grads = dict(input_grad=input_grad, filter_grad=filter_grad)
        return _finish(self, lean_conv(inputs, kernel, conv=conv, activation=self._input_fn,
                                       scale=scale, pad=pad, name=self.name, **grads))


@keras.saving.register_keras_serializable(package="tfseg")
class ReluConv2D(ActivationConv2D):
    """`ActivationConv2D` with a plain ReLU: the twin of `ReLU` -> `Conv2D`."""
