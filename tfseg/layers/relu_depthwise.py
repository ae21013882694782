"""ReLU fused into a depthwise convolution, keeping only the pre-ReLU input."""

import keras
import tensorflow as tf
from keras import ops

from tfseg.layers.inplace_norm import _gated


def relu_depthwise_conv2d(x, kernel, *, strides, padding, dilation_rate):
    """depthwise_conv2d(relu(x), kernel), keeping x instead of relu(x).

    The backward pass recomputes relu(x) from x, once the output gradient has
    arrived, for the filter gradient, and masks the input gradient where x <= 0
    with `ReluGrad`. Shapes: x [N, H, W, C], kernel [kh, kw, C, M] -> [N, H', W', C*M].
    """
    strides4 = [1, strides[0], strides[1], 1]
    padding = padding.upper()

    def conv(inputs, filters):
        return tf.nn.depthwise_conv2d(
            inputs, filters, strides4, padding, dilations=dilation_rate
        )

    @tf.custom_gradient
    def forward(x, kernel):
        xs, ks = tf.stop_gradient(x), tf.stop_gradient(kernel)
        y = conv(tf.nn.relu(xs), ks)

        def backward(dy):
            relu_x = tf.nn.relu(_gated(xs, dy))
            if tuple(dilation_rate) == (1, 1):
                d_relu = tf.nn.depthwise_conv2d_backprop_input(
                    tf.shape(xs), ks, dy, strides4, padding
                )
                d_kernel = tf.nn.depthwise_conv2d_backprop_filter(
                    relu_x, tf.shape(ks), dy, strides4, padding
                )
            else:
                # Dilated depthwise runs through space-to-batch; let TF's own
                # gradient handle that, on the recomputed input.
                with tf.GradientTape() as tape:
                    tape.watch([relu_x, ks])
                    y_again = conv(relu_x, ks)
                d_relu, d_kernel = tape.gradient(y_again, [relu_x, ks], output_gradients=dy)
            return tf.raw_ops.ReluGrad(gradients=d_relu, features=xs), d_kernel

        return y, backward

    return forward(x, kernel)


@keras.saving.register_keras_serializable(package="tfseg")
class ReluDepthwiseConv2D(keras.layers.DepthwiseConv2D):
    """Drop-in twin of `ReLU()` followed by `keras.layers.DepthwiseConv2D`.

    It takes the same arguments and has the same variables (kernel, optional bias)
    as the depthwise layer, which it replaces, so checkpoints load either way. The
    ReLU output is never kept: the layer keeps its input x, which the norm before
    it keeps as its output anyway. Fusing alone saves nothing in TF (ReLU's
    gradient reads the ReLU output, which the conv keeps too). The saving comes
    with an output-only norm before it, when one tensor serves both backward
    passes. Channels-last only. Shapes: [N, H, W, C] -> [N, H', W', C * depth_multiplier].
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.data_format != "channels_last":
            raise ValueError(f"{self.name}: ReluDepthwiseConv2D needs channels_last")

    def call(self, inputs):
        outputs = relu_depthwise_conv2d(
            inputs,
            ops.cast(self.kernel, self.compute_dtype),
            strides=self.strides,
            padding=self.padding,
            dilation_rate=self.dilation_rate,
        )
        if self.use_bias:
            outputs = ops.add(outputs, ops.cast(self.bias, self.compute_dtype))
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs
