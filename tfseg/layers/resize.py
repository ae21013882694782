"""Bilinear resize of one tensor to the spatial size of another.

Under XLA (a `tf.function(jit_compile=True)`), TF's `ResizeBilinear` is lowered to XLA's
own resize, which is not TF's kernel: a 5x7 map resized to 65x97 with half-pixel centres
differs from TF's by 25% (relative norm, XLA's CPU code at its default optimisation
level, TF 2.21), and so do the model's gradients. Where the
sizes are static, `resize_bilinear` therefore resizes by two small interpolation matrices
under XLA (one product per spatial axis): TF's grid and weights, so the same maths with
and without XLA, and the gradient is exactly the transpose. Outside XLA it keeps TF's
kernel (cheaper than dense products, one `ResizeBilinear` op in exported graphs).
"""

import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.framework import tensor_util

from tfseg.layers.xla_context import compiled


def interpolation_matrix(in_size, out_size, align_corners=False, dtype=np.float32):
    """[out_size, in_size] weights of TF's 1-D bilinear resize, as numpy `dtype`.

    Half-pixel centres (`tf.image.resize`): source (o + 0.5) * in/out - 0.5, clamped to
    the edges; `align_corners` (TF1): o * (in - 1)/(out - 1). Positions are computed in
    float32 as TF's kernel does (float64 for float64, which TF rounds to float32).
    Example: `interpolation_matrix(2, 4)` rows are [1, 0], [.75, .25], [.25, .75], [0, 1].
    """
    real = np.float64 if np.dtype(dtype) == np.float64 else np.float32
    out = np.arange(out_size, dtype=real)
    if align_corners:
        # TF: (in - 1) / (out - 1), or in / out for a single output (position 0 anyway).
        scale = real(in_size - 1) / real(max(out_size - 1, 1))
        position = out * scale
    else:
        scale = real(in_size) / real(out_size)
        position = (out + real(0.5)) * scale - real(0.5)
    lower = np.floor(position)
    fraction = position - lower
    rows = np.arange(out_size)
    matrix = np.zeros((out_size, in_size), real)
    # Taps outside the map clamp to its edge (TF: max(floor, 0), min(ceil, in - 1)).
    np.add.at(matrix, (rows, np.clip(lower, 0, in_size - 1).astype(int)), 1 - fraction)
    np.add.at(matrix, (rows, np.clip(lower + 1, 0, in_size - 1).astype(int)), fraction)
    return matrix.astype(dtype)


def resize_by_matrices(x, size, align_corners=False):
    """`x` [N, h, w, C] (h, w static) resized to `size` (H, W) ints by interpolation
    matrices: [N, H, W, C] in float64 for float64 `x`, else float32 (TF's kernel
    computes 16-bit inputs in float32 too). Example:
    `resize_by_matrices(tf.ones((1, 5, 7, 3)), (65, 97))` is ones [1, 65, 97, 3]."""
    dtype = tf.float64 if x.dtype == tf.float64 else tf.float32
    (h, w), (height, width) = x.shape[1:3], size
    rows = tf.constant(interpolation_matrix(h, height, align_corners, dtype.as_numpy_dtype))
    cols = tf.constant(interpolation_matrix(w, width, align_corners, dtype.as_numpy_dtype))
    x = tf.cast(x, dtype)
    # The order with fewer multiply-adds: height first costs H*w*(h + W) per channel,
    # width first h*W*(w + H).
    if height * w * (h + width) <= h * width * (w + height):
        return tf.einsum("Ww,nHwc->nHWc", cols, tf.einsum("Hh,nhwc->nHwc", rows, x))
    return tf.einsum("Hh,nhWc->nHWc", rows, tf.einsum("Ww,nhwc->nhWc", cols, x))


def _static_size(size):
    """(H, W) ints of `size` (ints, a TensorShape or a tensor such as
    `tf.shape(y)[1:3]`), or None where either is known only when run."""
    if isinstance(size, (tf.Tensor, tf.Variable)):
        dims = tensor_util.constant_value_as_shape(size)
        dims = dims.as_list() if dims.rank == 2 else [None, None]
    else:
        dims = [tf.get_static_value(d) if isinstance(d, tf.Tensor) else d for d in size]
    return None if any(d is None for d in dims) else tuple(int(d) for d in dims)


def resize_bilinear(x, size, align_corners=False):
    """`x` [N, h, w, C] resized bilinearly to `size` (H, W): half-pixel centres
    (`tf.image.resize`), or TF1's corner-aligned grid with `align_corners`.

    Under XLA with static h, w, H, W: `resize_by_matrices` (float64 for float64 `x`,
    else float32), whose result and gradient are TF's kernel's to float32 rounding (TF32's,
    where a GPU rounds the products);
    XLA's own lowering of the op is not. Otherwise TF's kernel, which computes and
    returns float32 whatever `x`'s dtype. Example:
    `resize_bilinear(tf.zeros((2, 9, 13, 5)), (33, 49))` has shape [2, 33, 49, 5].
    """
    static = _static_size(size)
    if (static is not None and None not in x.shape[1:3]
            and compiled()):
        return resize_by_matrices(x, static, align_corners)
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
