"""Bilinear resize of one tensor to the spatial size of another."""

import keras
import tensorflow as tf


def resize_bilinear(x, size, align_corners=False):
    """`x` [N, h, w, C] resized bilinearly to `size` (H, W): half-pixel centres
    (`tf.image.resize`), or TF1's corner-aligned grid with `align_corners`. TF's
    bilinear kernels compute and return float32, whatever `x`'s dtype."""
    if align_corners:
        # The op behind tf.compat.v1.image.resize_bilinear; half_pixel_centers must
        # be off for align_corners (they are two different grids).
        return tf.raw_ops.ResizeBilinear(images=x, size=size, align_corners=True,
                                         half_pixel_centers=False)
    return tf.image.resize(x, size, method="bilinear")


@keras.saving.register_keras_serializable(package="tfseg")
class ResizeLike(keras.layers.Layer):
    """Resizes `inputs[0]` bilinearly to the height and width of `inputs[1]`.

    Works for dynamic (None) spatial sizes, which `keras.layers.Resizing` does not:
    DeepLab upsamples to the size of the low-level feature and of the input image,
    whatever they are. Shapes: [N, h, w, C], [N, H, W, *] -> [N, H, W, C].
    Give it `dtype="float32"` to get float32 logits under mixed precision.

    Args:
      align_corners: False (default): half-pixel centres, `tf.image.resize`'s
        bilinear. True: TF1's corner-aligned convention, exactly
        `tf.compat.v1.image.resize_bilinear(x, size, align_corners=True)`, which
        research/deeplab uses for all its resizes (its checkpoints expect it).
    """

    def __init__(self, align_corners=False, **kwargs):
        super().__init__(**kwargs)
        self.align_corners = bool(align_corners)

    def call(self, inputs):
        x, reference = inputs
        resized = resize_bilinear(x, tf.shape(reference)[1:3], self.align_corners)
        return tf.cast(resized, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        x_shape, ref_shape = input_shape
        return (x_shape[0], ref_shape[1], ref_shape[2], x_shape[-1])

    def get_config(self):
        # Kept by config copies (a saved model, a rebuilt subclassed block).
        return {**super().get_config(), "align_corners": self.align_corners}
