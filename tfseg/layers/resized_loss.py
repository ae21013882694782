"""The logits' resize to the labels' size and the cross-entropy as one step that keeps
the small logits only.

DeepLabv3+ (Chen et al., ECCV 2018, https://arxiv.org/abs/1802.02611) computes its
logits at 1/4 of the image's size and resizes them bilinearly to it. Stock's softmax
cross-entropy then keeps a full-size tensor of every class's scores for its gradient
(softmax - one-hot): at 1024x2048 with 19 classes, 152 MiB an image, alive from the
forward pass to the end of the backward pass. Here the backward pass rebuilds it from
the small logits once the loss's gradient exists (gated on it, so it cannot run in the
forward pass), and the resize's gradient brings it down to the small size at once.
"""

import keras
import tensorflow as tf
from tensorflow.python.eager import record  # stop_recording has no public name

from tfseg.layers.gating import gated
from tfseg.layers.resize import ResizeLike, resize_bilinear


@keras.saving.register_keras_serializable(package="tfseg")
class LogitsResize(ResizeLike):
    """`ResizeLike` at a model's output whose input tfseg's training step may take
    instead (`tfseg.training.losses.for_model`): the loss then resizes the logits inside
    `resized_cross_entropy`. The same layer, values and config otherwise: evaluation,
    export and `predict` see the full-size logits.

    Example:

    >>> layer = LogitsResize()
    >>> layer([tf.ones([1, 5, 7, 3]), tf.ones([1, 17, 25, 3])]).shape
    TensorShape([1, 17, 25, 3])
    """


def resized_cross_entropy(logits, labels, weights, align_corners=False):
    """sum(weights * softmax cross-entropy of `logits` resized to the labels' size).

    Args:
      logits: float [N, h, w, C], before their resize (float32 or float64: a caller with
        16-bit logits casts them, as `tfseg.training.losses.ResizedPixelLoss` does, since
        a 16-bit sum over every pixel overflows).
      labels: int class ids [N, H, W]; where `weights` is 0 any value (255) is fine.
      weights: float [N, H, W], each pixel's weight (0: left out).
      align_corners: the resize's convention (`resize_bilinear`'s).

    Returns a scalar of `logits`' dtype. Its gradient is the stock composition's
    (`ResizeLike` then `tf.nn.sparse_softmax_cross_entropy_with_logits`) up to float
    rounding; only `logits` (and the labels and weights, which the step holds anyway)
    are kept for it.

    Example:

    >>> loss = resized_cross_entropy(tf.zeros([1, 5, 7, 3]), tf.zeros([1, 17, 25], tf.int64),
    ...                              tf.ones([1, 17, 25]))
    >>> round(float(loss) / (17 * 25), 4)  # log(3) a pixel
    1.0986
    """
    size = tf.shape(labels)[1:3]
    weights = tf.cast(weights, logits.dtype)
    labels = tf.where(tf.not_equal(weights, 0), labels, tf.zeros_like(labels))  # 255 there

    def scores(small):
        return tf.cast(resize_bilinear(small, size, align_corners), small.dtype)

    def cross_entropy(full):
        """(each pixel's cross-entropy [N*H*W], softmax - one-hot [N*H*W, C]): TF's fused
        kernel makes both in one pass and writes the second over the scores, as stock's
        loss does: one full-size tensor at a time."""
        classes = tf.shape(full)[-1]
        return tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(
            features=tf.reshape(full, [-1, classes]), labels=tf.reshape(labels, [-1]))

    @tf.custom_gradient
    def forward(small):
        with record.stop_recording():  # eager: keep the outer tape off the full size
            per_pixel, _ = cross_entropy(scores(small))
            total = tf.reduce_sum(tf.reshape(weights, [-1]) * per_pixel)

        def backward(dtotal):
            # After the forward's cross-entropy too: the gradient needs nothing of it,
            # so else both passes' full-size scores could be made at once.
            small_again = gated(small, [dtotal, total])
            with tf.GradientTape() as tape:
                tape.watch(small_again)
                full = scores(small_again)
            _, backprop = cross_entropy(full)
            dfull = tf.reshape(backprop * tf.reshape(weights * dtotal, [-1, 1]), tf.shape(full))
            return tape.gradient(full, small_again, output_gradients=dfull)

        return total, backward

    return forward(logits)
