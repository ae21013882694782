"""Bilinear resize of one tensor to the spatial size of another."""

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="tfseg")
class ResizeLike(keras.layers.Layer):
    """Resizes `inputs[0]` bilinearly to the height and width of `inputs[1]`.

    Works for dynamic (None) spatial sizes, which `keras.layers.Resizing` does not:
    DeepLab upsamples to the size of the low-level feature and of the input image,
    whatever they are. Shapes: [N, h, w, C], [N, H, W, *] -> [N, H, W, C].
    Give it `dtype="float32"` to get float32 logits under mixed precision.
    """

    def call(self, inputs):
        x, reference = inputs
        size = tf.shape(reference)[1:3]
        return tf.cast(tf.image.resize(x, size, method="bilinear"), self.compute_dtype)

    def compute_output_shape(self, input_shape):
        x_shape, ref_shape = input_shape
        return (x_shape[0], ref_shape[1], ref_shape[2], x_shape[-1])
