"""Output-only layer normalisation: the transformer blocks' norm, keeping y.

The stock `keras.layers.LayerNormalization` keeps its input x for the backward
pass. The twin keeps its output y (which the next layer, a Dense or an attention
projection, keeps anyway) and the per-row statistics, and rebuilds
x_hat = (y - beta) / gamma once the gradient arrives: the output-only batch norm's
idea (`tfseg.layers.inplace_norm`; Rota Bulo et al., CVPR 2018,
https://arxiv.org/abs/1712.02616) applied per row, as in Ba et al., "Layer
Normalization", https://arxiv.org/abs/1607.06450.

Gamma guard: as the batch norm twin's (`GAMMA_EPSILON`): where |gamma| is below it,
the output differs from stock by at most that times |x_hat|; elsewhere it is the
stock layer's to the bit. `tfseg.memory.rewrite` keeps the stock layer, and says
so, where gamma starts at zero.
"""

import keras
import tensorflow as tf
from keras import ops

from tfseg.layers.gating import gated, guard_gamma, plus_residual, residual_grad
from tfseg.layers.inplace_norm import GAMMA_EPSILON


def _normalized(xs, g, b, axis, epsilon, centered):
    """(y, the per-row 1/std) of `xs` normalised over `axis`, times `g` plus `b` (None:
    neither); RMS-normalised unless `centered`."""
    if centered:
        mean, variance = ops.moments(xs, axes=axis, keepdims=True)
        inv_std = tf.math.rsqrt(variance + epsilon)
        inv = inv_std if g is None else inv_std * g
        return xs * inv + (-mean * inv if b is None else -mean * inv + b), inv_std
    inv_std = tf.math.rsqrt(tf.reduce_mean(tf.square(xs), axis, keepdims=True) + epsilon)
    return (xs * inv_std if g is None else xs * inv_std * g), inv_std


def _input_grad(dy, y, g, b, inv_std, axis, centered):
    """(dx, x_hat): the input's gradient from the output gradient `dy`, and x_hat, rebuilt
    from `_normalized`'s output `y` (without a residual)."""
    x_hat = y if b is None else y - b
    x_hat = x_hat if g is None else x_hat / g
    dxhat = dy if g is None else dy * g
    dx = dxhat - x_hat * tf.reduce_mean(dxhat * x_hat, axis, keepdims=True)
    if centered:
        dx -= tf.reduce_mean(dxhat, axis, keepdims=True)
    dx *= inv_std
    return dx, x_hat


def inplace_layer_norm(x, gamma, beta, *, axis, epsilon, gamma_epsilon=GAMMA_EPSILON,
                       name=None, centered=True, residual=None):
    """Layer norm over `axis` (sorted ints >= 0) of `x`, keeping only y and the
    per-row mean and 1/std; with `centered=False`, RMS norm (Zhang & Sennrich 2019,
    https://arxiv.org/abs/1910.07467): x / sqrt(mean(x^2) + epsilon) * gamma.

    Args:
      x: any shape; normalised over `axis`.
      gamma, beta: the scale and offset, broadcastable to x (None: 1 and 0).
      epsilon: added to the variance.
      name: the name scope of the backward pass's ops (e.g. the layer's name).
      residual: None, or a tensor of x's shape added to y (a residual connection right
        after the norm, as in Swin-V2's blocks): the sum is returned and kept instead
        of y, which the backward pass rebuilds as sum - residual.

    Returns y in x's dtype; the arithmetic is `keras.ops.layer_normalization`'s (or
    `rms_normalization`'s), in float32 for half types, so outputs equal the stock
    layer's.
    """
    dtype = tf.float64 if x.dtype == tf.float64 else tf.float32
    x_dtype = x.dtype
    others = [i for i in range(len(x.shape)) if i not in axis]
    params = [p for p in (gamma, beta) if p is not None]

    @tf.custom_gradient
    def forward(x, *rest):
        residual = rest[len(params):]
        # stop_gradient: eager ops in here would otherwise stay on an outer tape, which
        # would keep their inputs.
        xs = tf.cast(tf.stop_gradient(x), dtype)
        g = None if gamma is None else guard_gamma(tf.cast(tf.stop_gradient(gamma), dtype),
                                              gamma_epsilon)
        b = None if beta is None else tf.cast(tf.stop_gradient(beta), dtype)
        y, inv_std = _normalized(xs, g, b, axis, epsilon, centered)
        out, rebuild = plus_residual(tf.cast(y, x_dtype), residual)

        def backward(dy):
            with tf.name_scope(name or "layer_norm"):
                dy32 = tf.cast(dy, dtype)
                # Rebuilt only once dy exists, not in the forward pass.
                y_gated = tf.cast(rebuild(gated(out, dy)), dtype)
                dx, x_hat = _input_grad(dy32, y_gated, g, b, inv_std, axis, centered)
                grads = [tf.cast(dx, x_dtype)]
                if gamma is not None:
                    grads.append(tf.cast(tf.reshape(tf.reduce_sum(dy32 * x_hat, others),
                                                    tf.shape(gamma)), gamma.dtype))
                if beta is not None:
                    grads.append(tf.cast(tf.reshape(tf.reduce_sum(dy32, others),
                                                    tf.shape(beta)), beta.dtype))
                return grads + residual_grad(dy, residual)

        return out, backward

    return forward(x, *params, *([] if residual is None else [residual]))


@keras.saving.register_keras_serializable(package="tfseg")
class InplaceLayerNormalization(keras.layers.LayerNormalization):
    """Drop-in twin of `keras.layers.LayerNormalization` that keeps only its output.

    Same arguments, variables (gamma, beta), names and order, so checkpoints load
    either way. `rms_scaling=True` runs the stock code. Shapes: any -> the same.
    `residual` (a call argument, the input's shape): returns y + residual, what a
    `keras.layers.Add` after the norm makes, keeping the sum instead of y
    (`tfseg.memory.rewrite` folds such Adds in).

    Example:

    >>> norm = InplaceLayerNormalization(epsilon=1e-6)
    >>> norm(tf.ones([2, 5, 8])).shape
    TensorShape([2, 5, 8])
    """

    def call(self, inputs, residual=None):
        if self.rms_scaling:
            y = super().call(inputs)
            return y if residual is None else ops.add(y, residual)
        rank = len(inputs.shape)
        axis = sorted(a % rank for a in ([self.axis] if isinstance(self.axis, int) else self.axis))
        shape = [inputs.shape[i] if i in axis else 1 for i in range(rank)]

        def param(weight, used):
            return ops.reshape(weight, shape) if used else None

        y = inplace_layer_norm(inputs, param(self.gamma, self.scale),
                               param(self.beta, self.center), axis=axis,
                               epsilon=self.epsilon, name=self.name, residual=residual)
        return ops.cast(y, self.compute_dtype)


@keras.saving.register_keras_serializable(package="tfseg")
class InplaceRMSNormalization(keras.layers.RMSNormalization):
    """Drop-in twin of `keras.layers.RMSNormalization` that keeps only its output.

    Same arguments and variable (scale), so checkpoints load either way.
    Shapes: any -> the same. `residual`: as for `InplaceLayerNormalization`.

    Example:

    >>> norm = InplaceRMSNormalization()
    >>> norm(tf.ones([2, 5, 8])).shape
    TensorShape([2, 5, 8])
    """

    def call(self, x, residual=None):
        rank = len(x.shape)
        axis = sorted(a % rank for a in self.axis)
        shape = [x.shape[i] if i in axis else 1 for i in range(rank)]
        y = inplace_layer_norm(x, ops.reshape(self.scale, shape), None, axis=axis,
                               epsilon=self.epsilon, name=self.name, centered=False,
                               residual=residual)
        return ops.cast(y, self.compute_dtype)
