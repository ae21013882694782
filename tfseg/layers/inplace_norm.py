"""Output-only ("in-place") batch and group normalisation.

The stock layers keep their *input* for the backward pass. These twins keep only
their *output* y and per-channel (per-group) statistics, and rebuild
x_hat = (y - beta) / gamma when the gradient arrives, as InPlace-ABN does
(Rota Bulo et al., "In-Place Activated BatchNorm for Memory-Optimized Training of
DNNs", CVPR 2018, https://arxiv.org/abs/1712.02616). The layer that follows (a
ReLU + depthwise conv, a 1x1 conv) keeps y anyway, so the input is never stored.

Gamma guard: reconstruction divides by gamma, which is ill-conditioned near 0.
The forward pass therefore uses gamma' = sign(gamma) * max(|gamma|, gamma_epsilon)
(sign(0) = +1). That equals gamma exactly wherever |gamma| >= gamma_epsilon
(default 1e-4), so outputs match the stock layer bit for bit there. Below it, the
output differs by at most gamma_epsilon * |x_hat|. The gradient reaches gamma
straight through the clamp, so a gamma near 0 can still grow.
InPlace-ABN uses |gamma| + eps. That changes every output, which a drop-in twin
must not do.

Fused kernels: in training, a 4-D float32 / float16 / bfloat16 batch norm of one
replica runs TF's FusedBatchNormV3 forward and FusedBatchNormGradV3 backward on
x rebuilt from y (`tfseg.layers.fused_norm`); float64, other ranks, sync BN and
epsilon < 1.001e-5 keep the unfused ops. Both match the stock layer.

Half precision: y is stored in the compute dtype, so under mixed_bfloat16 the
rebuilt x_hat carries y's rounding error, about ulp(|y|) / |gamma|: small for gamma
near 1 and beta near 0, large for a large |beta / gamma| (figures: docs/benchmarks.md,
"Smaller measurements"). Prefer float32 norms (or `mixed_float16`) for such layers.
"""

import tensorflow as tf
from keras import ops

from tfseg.layers import fused_norm
from tfseg.layers.gating import (gated, guard_gamma, plus_residual, residual_grad,
                                  stat_dtype)

GAMMA_EPSILON = 1e-4


def _all_reduce_sum(values, synchronized):
    """Sums across replicas for sync BN, so the backward matches the forward."""
    ctx = tf.distribute.get_replica_context()
    if synchronized and ctx is not None and ctx.num_replicas_in_sync > 1:
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, values)
    return values


def inplace_batch_norm(x, gamma, beta, *, epsilon, synchronized=False, gamma_epsilon=GAMMA_EPSILON,
                       name=None, residual=None, residual_relu=False, norm_form="auto"):
    """Training-mode batch norm over all axes but the last, keeping only y.

    Returns (y in x.dtype, batch mean, biased batch variance); statistics are
    float32 (float64 for float64 x). Where TF's fused kernels apply
    (`fused_norm.supports`) and `norm_form` (`fused_norm.FORMS`) is not "false", both
    passes run in them. `name`: the name scope of the backward pass's ops (the tape
    calls it outside the layer's), e.g. the layer's name, so memory reports can
    attribute them. `residual`: a tensor of y's shape added to y (returned as the
    output); the backward pass then keeps the sum, not y. `residual_relu`: add
    relu(residual) instead, without keeping it.
    """
    axes = list(range(len(x.shape) - 1))
    fused = fused_norm.supports(x, epsilon, synchronized, norm_form)
    dtype = stat_dtype(x.dtype)
    # Read outside `backward`: a closure over x would keep it alive on an eager tape.
    x_dtype, gamma_dtype, beta_dtype = x.dtype, gamma.dtype, beta.dtype

    @tf.custom_gradient
    def forward(x, gamma, beta, *residual):
        # stop_gradient: in eager mode the ops in here would otherwise be recorded
        # on the outer tape and keep x alive.
        g = guard_gamma(tf.cast(tf.stop_gradient(gamma), dtype), gamma_epsilon)
        b = tf.cast(tf.stop_gradient(beta), dtype)
        if fused:
            y, mean, variance, reserve = fused_norm.forward(tf.stop_gradient(x), g, b, epsilon)
        else:
            x32 = tf.cast(tf.stop_gradient(x), dtype)
            mean, variance = ops.moments(x32, axes=axes, synchronized=synchronized)
            y = ops.batch_normalization(x32, mean, variance, axis=-1, offset=b, scale=g,
                                        epsilon=epsilon)
        out, rebuild = plus_residual(tf.cast(y, x.dtype), residual, residual_relu)
        inv_std = tf.math.rsqrt(variance + epsilon)

        def backward(dy, *_):
            with tf.name_scope(name or "batch_norm"):
                more = residual_grad(dy, residual, residual_relu)
                if fused:  # x rebuilt from y for the gradient kernel
                    out_gated, k = gated(out, dy, fused_norm.rebuild_scale(g, variance, epsilon))
                    x_again = fused_norm.rebuild_input(rebuild(out_gated), k, mean, b)
                    dx, dgamma, dbeta = fused_norm.backward(dy, x_again, g, reserve, epsilon)
                    return (dx, tf.cast(dgamma, gamma_dtype), tf.cast(dbeta, beta_dtype), *more)
                dy32 = tf.cast(dy, dtype)
                out_gated, b_gated = gated(out, dy, b)
                x_hat = (tf.cast(rebuild(out_gated), dtype) - b_gated) / g
                sum_dy = tf.reduce_sum(dy32, axes)
                sum_dy_xhat = tf.reduce_sum(dy32 * x_hat, axes)
                count = tf.cast(tf.reduce_prod(tf.shape(dy32)[:-1]), dtype)
                g_sum_dy, g_sum_dy_xhat, g_count = _all_reduce_sum(
                    [sum_dy, sum_dy_xhat, count], synchronized
                )
                dx = (g * inv_std) * (dy32 - g_sum_dy / g_count - x_hat * (g_sum_dy_xhat / g_count))
                return (tf.cast(dx, x_dtype), tf.cast(sum_dy_xhat, gamma_dtype),
                        tf.cast(sum_dy, beta_dtype), *more)

        return (out, mean, variance), backward

    return forward(x, gamma, beta, *([] if residual is None else [residual]))


def frozen_batch_norm(x, mean, variance, gamma, beta, *, epsilon):
    """Inference-mode batch norm, y = x * scale + shift per channel, keeping nothing.

    The backward of an affine map is dx = dy * scale: it needs neither x nor y.
    Forward and backward use ``tf.nn.batch_normalization``'s arithmetic, so they
    equal the stock frozen layer's bit for bit. No gradient reaches the statistics,
    gamma or beta: for frozen layers only. x: [..., C]; the others [C].
    """
    dtype = stat_dtype(x.dtype)
    x_dtype = x.dtype
    scale = tf.math.rsqrt(tf.stop_gradient(variance) + epsilon) * tf.stop_gradient(gamma)
    shift = tf.stop_gradient(beta) - tf.stop_gradient(mean) * scale

    @tf.custom_gradient
    def forward(x):
        y = tf.cast(tf.stop_gradient(x), dtype) * scale + shift

        def backward(dy):
            return tf.cast(tf.cast(dy, dtype) * scale, x_dtype)

        return tf.cast(y, x_dtype), backward

    return forward(x)


def inplace_group_norm(x, gamma, beta, *, groups, epsilon, gamma_epsilon=GAMMA_EPSILON, name=None,
                       residual=None, residual_relu=False):
    """Group norm over channels-last `x` (any rank >= 3), keeping only y. `name`,
    `residual` and `residual_relu`: as for `inplace_batch_norm`."""
    channels = x.shape[-1]
    spatial_axes = list(range(1, len(x.shape) - 1))
    # Grouped layout [N, *spatial, G, C/G]; statistics over spatial and C/G.
    stat_axes = spatial_axes + [len(x.shape)]
    per_group = (groups, channels // groups)
    dtype = stat_dtype(x.dtype)
    x_dtype, gamma_dtype, beta_dtype = x.dtype, gamma.dtype, beta.dtype

    def grouped(t):
        return tf.reshape(t, tf.concat([tf.shape(t)[:-1], per_group], 0))

    @tf.custom_gradient
    def forward(x, gamma, beta, *residual):
        xg = grouped(tf.cast(tf.stop_gradient(x), dtype))
        g = tf.reshape(guard_gamma(tf.cast(tf.stop_gradient(gamma), dtype), gamma_epsilon),
                       per_group)
        b = tf.reshape(tf.cast(tf.stop_gradient(beta), dtype), per_group)
        mean, variance = tf.nn.moments(xg, axes=stat_axes, keepdims=True)
        inv_std = tf.math.rsqrt(variance + epsilon)
        # The same arithmetic as keras.layers.GroupNormalization, for identical outputs.
        scale = inv_std * g
        y = xg * scale + (b - mean * scale)
        x_shape = tf.shape(x)  # not x itself: see inplace_batch_norm
        out, rebuild = plus_residual(tf.cast(tf.reshape(y, x_shape), x_dtype), residual,
                                      residual_relu)

        def backward(dy):
            with tf.name_scope(name or "group_norm"):
                dyg = grouped(tf.cast(dy, dtype))
                out_gated, b_gated = gated(out, dy, b)
                x_hat = (grouped(tf.cast(rebuild(out_gated), dtype)) - b_gated) / g
                batch_and_spatial = [0] + spatial_axes
                dbeta = tf.reduce_sum(dyg, batch_and_spatial)
                dgamma = tf.reduce_sum(dyg * x_hat, batch_and_spatial)
                dxhat = dyg * g
                dx = inv_std * (
                    dxhat
                    - tf.reduce_mean(dxhat, stat_axes, keepdims=True)
                    - x_hat * tf.reduce_mean(dxhat * x_hat, stat_axes, keepdims=True)
                )
                dx = tf.cast(tf.reshape(dx, x_shape), x_dtype)
                dgamma = tf.cast(tf.reshape(dgamma, [channels]), gamma_dtype)
                dbeta = tf.cast(tf.reshape(dbeta, [channels]), beta_dtype)
                return (dx, dgamma, dbeta, *residual_grad(dy, residual, residual_relu))

        return out, backward

    return forward(x, gamma, beta, *([] if residual is None else [residual]))
