"""research/deeplab's weight decay as a loss term (``--weight_decay_type=l2``): the
penalty, and its gradient, which the training step (``tfseg.training.step``) adds to the
data gradients itself, after the tape. The decoupled decay is the optimizer's
(``tfseg.training.optim``).

Example:
    kernel = keras.Variable(tf.ones([3, 3]))
    l2_penalty(1e-4, [kernel])                           # 0.5 * 1e-4 * 9
    with_l2([tf.zeros([3, 3])], [kernel], [kernel], 1e-4)  # [1e-4 * kernel]
"""

import tensorflow as tf


def l2_penalty(weight_decay, kernels):
    """research/deeplab's ``l2_regularizer``: ``weight_decay / 2 * sum(kernel ** 2)``.

    Its gradient ``weight_decay * kernel`` joins the data gradient, so it goes
    through momentum (unlike the optimizer's decoupled decay). The step adds that
    gradient itself (``with_l2``), not through the tape.
    """
    return 0.5 * weight_decay * tf.add_n([tf.reduce_sum(tf.square(v.value)) for v in kernels])


def with_l2(grads, variables, decayed, coefficient):
    """``grads`` of ``variables`` plus ``coefficient * kernel`` for the ``decayed`` kernels.

    Added after the tape, not by it: the tape's gradient of the penalty tiles the
    loss's gradient to each kernel's shape and multiplies twice, and its buffers are
    ready as soon as the backward pass starts (they need only the loss's), so they
    can wait, kernel-sized, for the data gradients (what it saves:
    docs/benchmarks.md).

    Each ``coefficient * kernel`` is made only once its data gradient exists (a
    control dependency; XLA fuses the multiply into the add). Otherwise TF's
    executor runs the multiplies, which need nothing from the backward pass, at its
    start, and a scaled copy of every kernel waits through it.
    """
    decayed = {id(v) for v in decayed}
    out = []
    for g, v in zip(grads, variables):
        if id(v) in decayed:
            with tf.control_dependencies([g]):
                g = g + tf.cast(coefficient, v.dtype) * v.value
        out.append(g)
    return out
