"""Pooling layers that keep only their input: the activation (and padding) before them
fused in, as `tfseg.layers.fused_conv`'s convs do."""

import keras

from tfseg.layers.fused_conv import TakesInput
from tfseg.layers.keep_input import lean_avg_pool, lean_max_pool


@keras.saving.register_keras_serializable(package="tfseg")
class ActivationMaxPooling2D(TakesInput, keras.layers.MaxPooling2D):
    """Drop-in twin of an elementwise activation [-> `ZeroPadding2D`] ->
    `keras.layers.MaxPooling2D` (ResNet's stem: ReLU -> padding -> 3x3 max pool),
    keeping the activation's input and its own output (which the next layer keeps
    anyway) instead of the activation's output and its padded copy. Same arguments
    as the pool, plus `input_activation`, `input_padding` and `input_parts` (see
    `TakesInput`). Shapes: [N, H, W, C] -> [N, H', W', C].
    """

    def call(self, inputs):
        return lean_max_pool(inputs, ksize=[1, *self.pool_size, 1],
                             strides=[1, *self.strides, 1], padding=self.padding.upper(),
                             activation=self._input_fn, pad=self._pad(), name=self.name)


@keras.saving.register_keras_serializable(package="tfseg")
class ActivationAveragePooling2D(TakesInput, keras.layers.AveragePooling2D):
    """Drop-in twin of an elementwise activation -> `keras.layers.AveragePooling2D`,
    keeping the activation's input (for the activation's gradient; an average needs
    none) instead of its output: Inception's pooling branch, on the ReLUs of the
    block before, concatenated (`input_parts`). Same arguments as the pool, plus
    `input_activation` and `input_parts` (see `TakesInput`; no `input_padding`).
    Shapes: [N, H, W, C] -> [N, H', W', C].

    Example:

    >>> pool = ActivationAveragePooling2D(3, strides=1, padding="same", input_parts=[4, 6])
    >>> pool([tf.ones([2, 9, 9, 4]), tf.ones([2, 9, 9, 6])]).shape
    TensorShape([2, 9, 9, 10])
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.input_padding is not None:
            raise ValueError(f"{self.name}: an average pool cannot fold a zero padding "
                             f"(the padded zeros count in its average)")

    def call(self, inputs):
        return lean_avg_pool(inputs, ksize=[1, *self.pool_size, 1],
                             strides=[1, *self.strides, 1], padding=self.padding.upper(),
                             activation=self._input_fn, name=self.name)
