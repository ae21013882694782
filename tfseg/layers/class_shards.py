"""A many-class head that never holds all classes' full-resolution logits.

DeepLab's head is a 1x1 conv at stride 4 and a bilinear upsample to the image: at
1024x2048 the logits of 150 classes take 1.2 GB in float32 per image, and their
gradient as much again. Both are linear, so the classes can be taken in shards: a
shard's logits are `upsample(features @ kernel[:, shard] + bias[shard])`. The softmax
cross-entropy needs, per pixel, only each shard's maximum, its sum of exponentials
and the target's logit where the target is in the shard (the log-sum-exp combines
them exactly), and the argmax only each shard's maximum and where it is.

In the backward pass each shard's logits are made again from the features, gated on
the incoming gradient and on the forward pass's end (the loss's gradient needs nothing
of it), and their gradient `weight * (softmax - onehot)` is taken back
through the upsample and the 1x1 conv at once: the full-resolution tensors of a shard
live only while it runs, and shards run one after the other. Shards may sit on
different devices (the split head of the article tfseg follows): each shard's
logits and gradients stay on its device; only per-pixel [N, H, W] statistics cross.
"""

import keras
import tensorflow as tf
from tensorflow.python.eager import record

from tfseg.layers.gating import gated
from tfseg.layers.resize import resize_bilinear


def shard_bounds(num_classes, shards):
    """[(start, end)] of `shards` consecutive class ranges, as even as possible."""
    if not 1 <= shards <= num_classes:
        raise ValueError(f"shards must be in [1, {num_classes}] (the classes), got {shards}")
    edges = [num_classes * k // shards for k in range(shards + 1)]
    return list(zip(edges, edges[1:]))


class ClassShards:
    """The sharded logits of a 1x1 conv head followed by a bilinear upsample.

    Args:
      bounds: [(start, end)] class ranges (`shard_bounds`).
      devices: one device per shard (None: the caller's).
      align_corners: the upsample's convention (`tfseg.layers.ResizeLike`'s).

    Shapes: features [N, h, w, F]; kernel [1, 1, F, C] (a Conv2D's); bias [C];
    labels [N, H, W] int; weights [N, H, W] (0 where a pixel does not count).
    """

    def __init__(self, bounds, devices=None, align_corners=False):
        self.bounds = list(bounds)
        self.devices = list(devices or [None] * len(self.bounds))
        if len(self.devices) != len(self.bounds):
            raise ValueError(f"{len(self.bounds)} shards, {len(self.devices)} devices")
        self.align_corners = align_corners

    def _small(self, features, kernel, bias, start, end):
        return tf.einsum("nhwf,fc->nhwc", features, kernel[0, 0, :, start:end]) + bias[start:end]

    def _upsample(self, small, size):
        # TF's bilinear resize computes in float32: back to the features' dtype.
        return tf.cast(resize_bilinear(small, size, self.align_corners), small.dtype)

    def _logits(self, features, kernel, bias, start, end, size):
        return self._upsample(self._small(features, kernel, bias, start, end), size)

    @staticmethod
    def _pixel_indices(classes):
        """[N, H, W, 4] int64 indices (n, y, x, class) of int64 `classes` [N, H, W]."""
        shape = tf.shape(classes, out_type=tf.int64)
        grid = tf.meshgrid(*[tf.range(shape[k]) for k in range(3)], indexing="ij")
        return tf.stack(grid + [classes], -1)

    def _shards(self):
        return zip(self.bounds, self.devices)

    def _shard_stats(self, features, kernel, bias, labels, size):
        """(maxima, sums, targets): per shard, [N, H, W] each, its logits' maximum, the
        sum of their exp(z - maximum) and the target's logit (0 where it is elsewhere)."""
        maxima, sums, targets = [], [], []
        x = features
        for (start, end), device in self._shards():
            with tf.device(device):
                z = self._logits(x, kernel, bias, start, end, size)
                m = tf.reduce_max(z, -1)
                maxima.append(m)
                sums.append(tf.reduce_sum(tf.exp(z - m[..., None]), -1))
                local = labels - start
                inside = (local >= 0) & (local < end - start)
                picked = tf.gather(z, tf.clip_by_value(local, 0, end - start - 1),
                                   batch_dims=3)
                targets.append(tf.where(inside, picked, tf.zeros_like(picked)))
            # The next shard starts once this one's logits are reduced (and freed).
            x = gated(gated(features, sums[-1]), targets[-1])
        return maxima, sums, targets

    def _small_grad(self, x, kernel, bias, start, end, size, labels, lse, pixel):
        """The loss's gradient at shard [start, end)'s logits before the upsample, made
        again from the features `x`; `lse`: every pixel's log-sum-exp, `pixel` its
        weight times the loss's gradient."""
        small = self._small(x, kernel, bias, start, end)
        with tf.GradientTape() as tape:
            tape.watch(small)
            z = self._upsample(small, size)
        # d/dz of the cross-entropy, softmax - onehot(label): 1 is taken off at each pixel's
        # label by a scatter, not by a shard-sized one-hot (the scatter copies the softmax:
        # two shard-sized buffers at a time, measured). The labels wait for the logits:
        # anything that needs no gradient runs early, every shard's at once.
        local = gated(labels - start, small)
        inside = (local >= 0) & (local < end - start)
        dz = tf.tensor_scatter_nd_sub(
            tf.exp(z - lse[..., None]),
            self._pixel_indices(tf.clip_by_value(local, 0, end - start - 1)),
            tf.cast(inside, z.dtype)) * pixel[..., None]
        return tape.gradient(z, small, output_gradients=dz)

    def cross_entropy(self, features, kernel, bias, labels, weights, size):
        """sum(weights * softmax cross-entropy) of the logits at `size` (H, W), a scalar."""
        # int64 index math: on a GPU, TF keeps int32 tensors and their arithmetic in
        # host memory (CPU work and copies every step); int64 stays on the device.
        labels = tf.cast(labels, tf.int64)
        weights = tf.cast(weights, features.dtype)

        @tf.custom_gradient
        def total(features, kernel, bias):
            with record.stop_recording():  # eager: keep the shards off the outer tape
                maxima, sums, targets = self._shard_stats(features, kernel, bias, labels, size)
                top = tf.reduce_max(tf.stack(maxima), 0)
                lse = top + tf.math.log(tf.add_n([s * tf.exp(m - top)
                                                  for m, s in zip(maxima, sums)]))
                loss = tf.reduce_sum(weights * (lse - tf.add_n(targets)))

            def grad(dy):
                # dy (1 / labelled pixels, from the loss) needs nothing of the forward
                # pass: wait for its end too, or the rebuilds run beside it.
                pixel = gated(dy * weights, lse)
                d_features, d_kernel, d_bias = [], [], []
                gate = pixel
                for (start, end), device in self._shards():
                    with tf.device(device):
                        # Made again only once the gradient (or the shard before) exists.
                        x = gated(features, gate)
                        d_small = self._small_grad(x, kernel, bias, start, end, size, labels,
                                                   lse, pixel)
                        d_kernel.append(tf.einsum("nhwf,nhwc->fc", x, d_small))
                        d_bias.append(tf.reduce_sum(d_small, [0, 1, 2]))
                        d_features.append(tf.einsum("nhwc,fc->nhwf", d_small,
                                                    kernel[0, 0, :, start:end]))
                    gate = d_small
                return (tf.add_n(d_features), tf.concat(d_kernel, -1)[None, None],
                        tf.concat(d_bias, 0))

            return loss, grad

        return total(features, kernel, bias)

    def classes(self, features, kernel, bias, size):
        """The argmax class of every pixel at `size` [N, H, W] int32 (the first of ties,
        as `tf.argmax` of the whole logits)."""
        maxima, where = [], []
        x = features
        for (start, end), device in self._shards():
            with tf.device(device):
                z = self._logits(x, kernel, bias, start, end, size)
                maxima.append(tf.reduce_max(z, -1))
                # int64: see cross_entropy (only the result is int32).
                where.append(tf.argmax(z, -1, output_type=tf.int64) + start)
            x = gated(gated(features, maxima[-1]), where[-1])
        best = tf.argmax(tf.stack(maxima, -1), -1, output_type=tf.int64)
        return tf.cast(tf.gather(tf.stack(where, -1), best, batch_dims=3), tf.int32)


@keras.saving.register_keras_serializable(package="tfseg")
class ShardedLogits(keras.layers.Layer):
    """DeepLab's `logits` 1x1 conv for many classes, whose logits are only ever taken in
    shards of classes (`ClassShards`), each upsampled to the labels' size.

    It has the conv's variables ("logits/kernel" [1, 1, F, C], "logits/bias" [C], as
    a `Conv2D` named "logits"), so checkpoints load either way; its call returns its
    input, the features [N, h, w, F], and the loss (`tfseg.training.losses.ShardedPixelLoss`)
    and the predictions come from `cross_entropy` and `classes`.

    Args:
      num_classes: C.
      shards: how many class shards (on one device: the chunked head).
      devices: the devices the shards go on, in consecutive runs (the split head); at
        least one shard each. Each shard's working set is a few of its full-size
        tensors, so more shards than devices lower each device's peak further.
      align_corners: the upsample's convention (`tfseg.layers.ResizeLike`).
      kernel_initializer: of the kernel (the bias starts at 0).
    """

    def __init__(self, num_classes, shards=1, devices=None, align_corners=False,
                 kernel_initializer="he_normal", **kwargs):
        super().__init__(**kwargs)
        self.num_classes = int(num_classes)
        self.devices = list(devices) if devices else None
        self.shards = max(int(shards), len(self.devices or ()))
        self.align_corners = bool(align_corners)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        on = None if self.devices is None else [
            self.devices[k * len(self.devices) // self.shards] for k in range(self.shards)]
        self.head = ClassShards(shard_bounds(self.num_classes, self.shards), on,
                                self.align_corners)

    def build(self, input_shape):
        self.kernel = self.add_weight(name="kernel", initializer=self.kernel_initializer,
                                      shape=(1, 1, input_shape[-1], self.num_classes))
        self.bias = self.add_weight(name="bias", shape=(self.num_classes,), initializer="zeros")

    def call(self, features):
        return features

    def _weights(self):
        # Read as tensors: the custom gradient returns their gradients as its inputs'.
        return tf.convert_to_tensor(self.kernel), tf.convert_to_tensor(self.bias)

    def cross_entropy(self, features, labels, weights):
        """sum(weights * cross-entropy) of every pixel of `labels` [N, H, W]."""
        return self.head.cross_entropy(features, *self._weights(), labels, weights,
                                       tf.shape(labels)[1:3])

    def classes(self, features, size):
        """The predicted class of every pixel at `size` (H, W): [N, H, W] int32."""
        return self.head.classes(features, *self._weights(), size)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes, "shards": self.shards,
                "devices": self.devices, "align_corners": self.align_corners,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer)}
