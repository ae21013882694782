"""The gates and guards every twin's backward pass shares.

A twin keeps less than its stock layer and rebuilds the rest in its backward pass
(`tf.custom_gradient`). Three facts of TensorFlow shape how:

- Ops run eagerly inside a custom gradient's forward function are recorded on any
  outer tape, which then keeps their inputs: the twins read their inputs through
  `tf.stop_gradient` there.
- A rebuild in the backward function that does not depend on the incoming gradient
  is scheduled by TF as soon as its inputs exist, that is during the forward pass,
  and its result stays alive until the backward pass: memory goes up, not down.
  `gated` makes each rebuild wait for the gradient.
- XLA drops control dependencies, so under XLA the wait must be a data dependency.

Example:

    import tensorflow as tf
    from tfseg.layers import gating

    @tf.custom_gradient
    def square(x):
        x = tf.stop_gradient(x)           # nothing recorded on an outer tape

        def backward(dy):
            again = gating.gated(x, dy)   # read only once dy exists
            return 2.0 * again * dy

        return x * x, backward
"""

import tensorflow as tf

from tfseg.layers.xla_context import compiled


def gated(tensor, gradient, vector=None, always_data=False):
    """`tensor`, usable only once `gradient` exists: a rebuild made from it cannot run
    in the forward pass; with `vector`, (tensor, vector).

    Args:
      tensor: what the backward pass rebuilds from (a kept output, a kept input).
      gradient: the incoming gradient, or a list of tensors to wait for (the first
        also carries the data dependency under XLA).
      vector: optional, a small tensor (per channel) that every full-size op of the
        rebuild reads; under XLA the data dependency goes on it instead of `tensor`.
      always_data: add the data dependency without XLA too: for a gate that must hold
        where XLA's auto-clustering (`--tf_xla_auto_jit`) may compile the graph outside
        an XLA context (the training step's micro-batches).

    A control dependency orders the rebuild in TF's executor and costs nothing (the
    identity forwards the buffer). Under XLA, which drops control dependencies, the
    gradient is also a data input: 0 * one of its elements (XLA does not fold x * 0
    for floats, NaN * 0 being NaN), added to `vector` if given, else to `tensor`
    (a full-size add then).
    """
    waits = list(gradient) if isinstance(gradient, (list, tuple)) else [gradient]
    with tf.control_dependencies(waits):
        out = tf.identity(tensor)
    xla = compiled()
    if not (xla or always_data):
        return out if vector is None else (out, vector)
    flat = tf.reshape(waits[0], [-1])
    zero = tf.reduce_sum(flat[: tf.minimum(tf.size(flat), 1)]) * 0  # empty: 0
    if vector is None:
        return out + tf.cast(zero, out.dtype)
    return out, vector + tf.cast(zero, vector.dtype)


def guard_gamma(gamma, gamma_epsilon):
    """sign(gamma) * max(|gamma|, gamma_epsilon), sign(0) = +1: an output-only norm
    divides by gamma to rebuild its input, which is ill-conditioned near 0."""
    return tf.where(gamma >= 0, tf.maximum(gamma, gamma_epsilon),
                    tf.minimum(gamma, -gamma_epsilon))


def stat_dtype(dtype):
    """The dtype a norm's statistics run in: float32 for half types (as the stock
    layers do), float64 kept as float64."""
    return tf.float64 if dtype == tf.float64 else tf.float32


def plus_residual(y, residual, relu=False):
    """(y + residual, rebuild): a residual add folded into the norm before it.

    The backward pass then keeps the sum (which the next layer keeps anyway) and the
    residual (kept by its own producer) instead of y, and `rebuild(sum)` gives
    y = sum - residual, within an ulp of the sum. `residual`: [] or [tensor]. With
    `relu`, the residual added is relu(residual), not kept (ResNet's block output
    feeding the next block's add), and run again for the rebuild once the sum is gated.
    """
    if not residual:
        return y, lambda out: out
    r = tf.stop_gradient(residual[0])  # see the module docstring: the outer tape
    if not relu:
        return y + tf.cast(r, y.dtype), lambda z: z - tf.cast(r, z.dtype)
    return (y + tf.cast(tf.nn.relu(r), y.dtype),
            lambda z: z - tf.cast(tf.nn.relu(gated(r, z)), z.dtype))


def residual_grad(dz, residual, relu=False):
    """[the residual's gradient] for `plus_residual`'s sum's gradient `dz`; [] without
    a residual."""
    if not residual:
        return []
    grad = tf.cast(dz, residual[0].dtype)
    return [tf.raw_ops.ReluGrad(gradients=grad, features=residual[0]) if relu else grad]
