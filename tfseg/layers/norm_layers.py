"""The output-only norm twins as Keras layers (the maths: `tfseg.layers.inplace_norm`)."""

import keras
import tensorflow as tf
from keras import ops

from tfseg.layers.fused_norm import check_form
from tfseg.layers.gating import stat_dtype
from tfseg.layers.inplace_norm import frozen_batch_norm, inplace_batch_norm, inplace_group_norm


def _affine(layer, inputs):
    dtype, channels = stat_dtype(inputs.dtype), inputs.shape[-1]
    gamma = ops.cast(layer.gamma, dtype) if layer.scale else tf.ones([channels], dtype)
    beta = ops.cast(layer.beta, dtype) if layer.center else tf.zeros([channels], dtype)
    return gamma, beta


def _plus(layer, y, residual, relu=False):
    """The stock layer's output [+ residual, or + relu(residual)], as a following
    `keras.layers.Add` adds."""
    y = ops.cast(y, layer.compute_dtype)
    if residual is None:
        return y
    return ops.add(y, ops.relu(residual) if relu else residual)


@keras.saving.register_keras_serializable(package="tfseg")
class InplaceBatchNormalization(keras.layers.BatchNormalization):
    """Drop-in twin of `keras.layers.BatchNormalization` that keeps only its output.

    Same arguments, variables (gamma, beta, moving_mean, moving_variance), names
    and order, so checkpoints load either way. In training it keeps y and the batch
    statistics instead of x, and updates the moving statistics exactly as the stock
    layer does. With `synchronized=True` the backward sums are all-reduced too.
    Inference of a trainable layer, masks, renorm and channels-first axes run the stock
    code. Shapes: [..., C] -> [..., C]. See the module docstring for the gamma guard.

    Frozen (``trainable=False``: inference mode in training too, as the stock layer)
    it is a per-channel affine whose backward keeps nothing (``frozen_batch_norm``);
    it is exact, and gamma and beta get no gradient.

    `residual` (a call argument, y's shape): returns y + residual, what a
    `keras.layers.Add` after the norm makes, keeping the sum instead of y (a
    residual connection then keeps one tensor less; `tfseg.memory.rewrite` folds
    such Adds in). `residual_relu`: adds relu(residual) instead, without keeping it
    (ResNet's block output, a ReLU of the previous sum, feeding this block's add).

    `norm_form` (`tfseg.layers.fused_norm.FORMS`, `--fused_norm`): "true" runs TF's
    fused kernels in training where they apply, "false" the unfused ops; "auto" (the
    default) the measured choice, fused. In its config: a saved model reloads with it.
    """

    def __init__(self, *args, norm_form="auto", **kwargs):
        check_form(norm_form)
        super().__init__(*args, **kwargs)
        self.norm_form = norm_form

    def get_config(self):
        return {**super().get_config(), "norm_form": self.norm_form}

    def call(self, inputs, training=None, mask=None, residual=None, residual_relu=False):
        stock = mask is not None or self.renorm or self.axis not in (-1, len(inputs.shape) - 1)
        if not self.trainable and not stock:
            gamma, beta = _affine(self, inputs)
            dtype = stat_dtype(inputs.dtype)
            y = frozen_batch_norm(inputs, ops.cast(self.moving_mean, dtype),
                                  ops.cast(self.moving_variance, dtype), gamma, beta,
                                  epsilon=self.epsilon)
            return _plus(self, y, residual, residual_relu)
        if not (training and self.trainable) or stock:
            return _plus(self, super().call(inputs, training=training, mask=mask), residual,
                         residual_relu)
        gamma, beta = _affine(self, inputs)
        y, mean, variance = inplace_batch_norm(
            inputs, gamma, beta, epsilon=self.epsilon, synchronized=self.synchronized,
            name=self.name, residual=residual, residual_relu=residual_relu,
            norm_form=self.norm_form)
        for var, value in ((self.moving_mean, mean), (self.moving_variance, variance)):
            value = tf.stop_gradient(value)
            var.assign(ops.cast(var, value.dtype) * self.momentum + value * (1.0 - self.momentum))
        return ops.cast(y, self.compute_dtype)


@keras.saving.register_keras_serializable(package="tfseg")
class InplaceGroupNormalization(keras.layers.GroupNormalization):
    """Drop-in twin of `keras.layers.GroupNormalization` that keeps only its output.

    Same arguments, variables, names and order as the stock layer. Group norm has
    no training mode, so it always keeps y and rebuilds x_hat in the backward pass;
    channels-first axes run the stock code. Wu & He, "Group Normalization", ECCV
    2018, https://arxiv.org/abs/1803.08494. Shapes: [N, ..., C] -> [N, ..., C].
    `residual` and `residual_relu`: as for `InplaceBatchNormalization`.
    """

    def call(self, inputs, residual=None, residual_relu=False):
        if self.axis not in (-1, len(inputs.shape) - 1):
            return _plus(self, super().call(inputs), residual, residual_relu)
        gamma, beta = _affine(self, inputs)
        y = inplace_group_norm(inputs, gamma, beta, groups=self.groups, epsilon=self.epsilon,
                               name=self.name, residual=residual, residual_relu=residual_relu)
        return ops.cast(y, self.compute_dtype)
