"""TF's fused batch-norm kernels for the output-only batch norm's training step.

Keras 3's `BatchNormalization` on TensorFlow is unfused: moments, then
elementwise ops, each a pass over the activation, and autodiff through all of
them. `FusedBatchNormV3` and `FusedBatchNormGradV3` do the forward and the
backward in one kernel each (oneDNN's on the CPU, cuDNN's on a GPU, XLA's under
`jit_compile`). `tfseg.layers.inplace_norm.inplace_batch_norm` calls these
helpers where the kernels apply (`supports`): NHWC, float32 / float16 /
bfloat16, one replica's statistics.

The gradient kernel wants x, which the output-only norm does not keep. It gets
x rebuilt from y, x = x_hat * sigma + mu with x_hat = (y - beta) / gamma, as
y * k + (mu - beta * k), k = sigma / gamma: two elementwise passes, and x lives
only in the backward pass. The other form tried, a closed form from y with no
x (dx = a * dy + c * y + d per channel, from sums of dy and dy * y), takes
five passes and two reductions. CPU time of one layer's forward and backward
(oneDNN, 2 cores, median of 30), at [2, 129, 129, 128] and [2, 65, 65, 364]:
stock 33.6 / 22.6 ms, the unfused twin 33.6 / 22.5, the closed form
29.4 / 20.6, these kernels 24.7 / 20.0.
"""

import tensorflow as tf

# cuDNN's CUDNN_BN_MIN_EPSILON was 1e-5 (older releases reject less), which is why
# Keras 2 clamped its fused path's epsilon to 1.001e-5. The CPU kernels take 1e-5
# (checked); not knowing the GPU's cuDNN here, a smaller epsilon (research/deeplab's
# head, 1e-5) takes the unfused path, which is exact, rather than a clamp, which
# changes the outputs.
FUSED_MIN_EPSILON = 1.001e-5
FUSED_DTYPES = (tf.float32, tf.float16, tf.bfloat16)

# Which form a batch-norm twin takes where the fused kernels apply: its own `norm_form`
# setting (`--fused_norm`, `tfseg.layers.InplaceBatchNormalization`). "true" the fused
# kernels, "false" the unfused ops (stock Keras' own), "auto" the measured choice:
# fused, faster on the CPU (above). On a GPU, cuDNN runs float32 NHWC batch norm
# through NCHW transposes, which may tip it the other way; until a GPU measures it,
# "auto" is fused there too.
FORMS = ("auto", "true", "false")


def check_form(form):
    """A ValueError naming `FORMS` unless `form` is one of them."""
    if form not in FORMS:
        raise ValueError(f"fused norm form must be one of {FORMS}, got {form!r}")


def supports(x, epsilon, synchronized, form="auto"):
    """Whether the fused kernels compute this batch norm exactly: a 4-D NHWC x of a
    dtype they take (not float64), an epsilon every backend accepts, and no
    cross-replica statistics (they see one replica's batch); and `form` (one of
    `FORMS`) is not "false"."""
    return (form != "false" and len(x.shape) == 4 and x.dtype in FUSED_DTYPES
            and epsilon >= FUSED_MIN_EPSILON and not synchronized)


def forward(x, gamma, beta, epsilon):
    """Training-mode batch norm of NHWC `x` by `FusedBatchNormV3`, in float32.

    gamma, beta: float32 [C]. Returns (y, batch mean, biased batch variance,
    reserve), all float32; `reserve` is what `backward` needs (the kernel's own
    saved statistics: the variance on the CPU, 1 / sigma and a workspace in cuDNN).
    Half-precision x is cast to float32 first, as the stock layer does: both
    kernels then run in float32, so `backward` gets a reserve of its own dtype.
    """
    empty = tf.constant([], tf.float32)  # one op, where tf.zeros makes three
    out = tf.raw_ops.FusedBatchNormV3(
        x=tf.cast(x, tf.float32), scale=gamma, offset=beta, mean=empty, variance=empty, epsilon=epsilon,
        exponential_avg_factor=1.0, data_format="NHWC", is_training=True)
    static = x.shape[:-1]
    count = (float(static.num_elements()) if static.is_fully_defined()
             else tf.cast(tf.reduce_prod(tf.shape(x)[:-1]), tf.float32))
    variance = biased_variance(out.batch_variance, count)
    reserve = (out.reserve_space_1, out.reserve_space_2, out.reserve_space_3)
    return out.y, out.batch_mean, variance, reserve


def biased_variance(unbiased, count):
    """The biased variance Keras averages, from the kernel's unbiased one (TF1's moving
    average wants that) over `count` values per channel.

    A single value per channel (the ASPP's image pooling at batch 1) has variance 0.
    The CPU kernel returns 0 for it, but cuDNN's unbiased variance is 0 * 1 / (1 - 1),
    not finite, so its factor (n - 1) / n = 0 is applied by `multiply_no_nan`, whose
    product with 0 is 0 whatever the other factor: a plain product made every gradient
    NaN at the first step on a GPU (the full-resolution recipe with batch norm).
    `count` is a number where the shape is static (no ops) or a float32 tensor.

        biased_variance(tf.constant([float("nan")]), 1.0)   # [0.]
    """
    factor = (max(count - 1, 0) / max(count, 1) if isinstance(count, (int, float))
              else tf.maximum(count - 1, 0) / tf.maximum(count, 1))  # 0 values: 0 too
    return tf.math.multiply_no_nan(unbiased, tf.cast(factor, unbiased.dtype))


def rebuild_scale(gamma, variance, epsilon):
    """k = sigma / gamma, the per-channel factor of `rebuild_input` (gate this one on
    the gradient: every full-size op of the rebuild reads it)."""
    return 1.0 / (tf.math.rsqrt(variance + epsilon) * gamma)


def rebuild_input(y, k, mean, beta):
    """x = x_hat * sigma + mu = y * k + (mu - beta * k), in float32."""
    return tf.cast(y, tf.float32) * k + (mean - beta * k)


def backward(dy, x, gamma, reserve, epsilon):
    """`FusedBatchNormGradV3` in training mode: (dx in dy.dtype, dgamma, dbeta).

    x: the input rebuilt by `rebuild_input`, float32. The kernel runs in float32
    for half-precision dy too, as `forward` did: x rebuilt in half precision
    would be rounded again, by ulp(x) / sigma in x_hat, more than y's own
    rounding where |mu| >> sigma.
    """
    dy32 = tf.cast(dy, tf.float32)
    dx, dgamma, dbeta, _, _ = tf.raw_ops.FusedBatchNormGradV3(
        y_backprop=dy32, x=x, scale=gamma, reserve_space_1=reserve[0],
        reserve_space_2=reserve[1], reserve_space_3=reserve[2], epsilon=epsilon,
        data_format="NHWC", is_training=True)
    return tf.cast(dx, dy.dtype), dgamma, dbeta
