"""The twin of Keras's one-layer separable conv, `keras.layers.SeparableConv2D`.

A stock `ReLU -> SeparableConv2D` keeps three maps for its backward pass: relu(x), for
the depthwise kernel's gradient and ReLU's own; the depthwise output, for the pointwise
kernel's; and x or relu(x). The twin keeps only x, the output of the norm before it,
which an output-only norm keeps anyway. It runs the activation and the depthwise conv
again once the output gradient has arrived (`keep_input.lean_conv`), and the pointwise
conv runs once in each pass, as in stock.
"""

import keras
from keras import ops

from tfseg.layers.fused_conv import TakesInput
from tfseg.layers.keep_input import lean_conv


@keras.saving.register_keras_serializable(package="tfseg")
class ActivationSeparableConv2D(TakesInput, keras.layers.SeparableConv2D):
    """Drop-in twin of [an elementwise activation [-> `ZeroPadding2D`] ->]
    `keras.layers.SeparableConv2D` (Xception's convs): it keeps only its input, not the
    activation's output or the depthwise conv's.

    Same arguments and variables as the separable conv (`depthwise_kernel`,
    `pointwise_kernel`, `bias`), plus `input_activation` (None: no activation in front)
    and `input_padding` (see `TakesInput`).
    Shapes: [N, H, W, C] -> [N, H', W', filters].

    Example:

    >>> stock = keras.layers.SeparableConv2D(8, 3, padding="same", name="sep")
    >>> twin = ActivationSeparableConv2D.from_config(
    ...     {**stock.get_config(), "input_activation": "relu"})
    >>> twin(keras.ops.ones((1, 9, 11, 4))).shape  # relu, then the separable conv
    TensorShape([1, 9, 11, 8])
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.input_parts is not None:
            raise ValueError(f"{self.name}: {type(self).__name__} takes one input")

    def call(self, inputs):
        def conv(t, kernels):
            return ops.separable_conv(t, *kernels, strides=self.strides, padding=self.padding,
                                      dilation_rate=self.dilation_rate,
                                      data_format=self.data_format)

        kernels = tuple(ops.cast(k, self.compute_dtype)
                        for k in (self.depthwise_kernel, self.pointwise_kernel))
        outputs = lean_conv(inputs, kernels, conv=conv, activation=self._input_fn,
                            pad=self._pad(), name=self.name)
        if self.use_bias:
            outputs = ops.add(outputs, ops.cast(self.bias, self.compute_dtype))
        return self.activation(outputs) if self.activation is not None else outputs
