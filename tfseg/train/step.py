"""The distributed training step: ``strategy.run`` of forward, backward and update."""

import keras
import tensorflow as tf

from tfseg.data import IGNORE_LABEL
from tfseg.models import normalize


class PixelLoss:
    """Cross-entropy over labelled pixels, weighted by class, normalised over the *global* batch.

    Each replica returns ``sum(weight * ce) / sum(weight)`` where the denominator
    is all-reduced over replicas. The optimizer sums the replicas' gradients, so
    the update equals that of one device seeing the whole batch, whatever the
    split of labelled pixels between replicas.
    """

    def __init__(self, class_weights=()):
        self.class_weights = tf.constant(class_weights, tf.float32) if class_weights else None
        # reduction="sum": the normalisation is done here, across replicas.
        self.cross_entropy = keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, ignore_class=IGNORE_LABEL, reduction="sum")

    def weights(self, labels):
        valid = tf.cast(tf.not_equal(labels, IGNORE_LABEL), tf.float32)
        if self.class_weights is None:
            return valid
        safe = tf.where(labels == IGNORE_LABEL, 0, labels)
        return valid * tf.gather(self.class_weights, safe)

    def __call__(self, labels, logits):
        weights = self.weights(labels)
        total = self.cross_entropy(labels, logits, sample_weight=weights)
        count = tf.cast(tf.reduce_sum(weights), total.dtype)
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            count = context.all_reduce(tf.distribute.ReduceOp.SUM, count)
        return total / tf.maximum(count, 1.0)


def l2_penalty(weight_decay, kernels):
    """research/deeplab's ``l2_regularizer``: ``weight_decay / 2 * sum(kernel ** 2)``.

    Its gradient ``weight_decay * kernel`` joins the data gradient, so it goes
    through momentum (unlike the optimizer's decoupled decay).
    """
    return 0.5 * weight_decay * tf.add_n([tf.reduce_sum(tf.square(v.value)) for v in kernels])


def make_train_step(strategy, model, optimizer, loss_fn, step, jit_compile=False,
                    weight_decay=0.0, decayed=()):
    """A tf.function: one distributed batch -> (loss, finite flag, replica 0's predictions).

    A batch is (images uint8 [B, H, W, 3], labels int32 [B, H, W]), as
    ``tfseg.data.build_dataset`` makes them (float 0-255 images work too).
    Each replica normalises its images (``tfseg.models.normalize``) on its own
    device, so the host->device copy carries 1 byte a channel, not 4.

    The loss is ``loss_fn``'s plus, with ``decayed`` kernels, ``l2_penalty``:
    each replica adds its share, so the summed gradients hold it once.

    Gradients are computed in one ``strategy.run`` and applied in a second one
    only when the loss and every gradient on every replica are finite, so a NaN
    never reaches the weights or the momentum. The ``tf.cond`` sits in the
    cross-replica context because tf.distribute cannot ``merge_call`` (which
    ``apply_gradients`` does) from a cond inside a replica. Under ``mixed_float16``
    the ``LossScaleOptimizer`` does its own skipping of overflowing steps, so only
    the loss is checked. The caller stops the run on a non-finite loss.

    ``step`` (an int64 variable) counts applied updates: it moves by exactly as
    much as ``optimizer.iterations``, which drives the learning-rate schedule
    and does not move when the loss-scale optimizer skips an update. Counting
    calls instead would run the step (checkpoint names, --train_steps) ahead of
    the schedule by every skipped update.
    """
    loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    variables = model.trainable_variables

    def forward_backward(images, labels):
        with tf.GradientTape() as tape:
            logits = model(normalize(images), training=True)
            loss = loss_fn(labels, logits)
            if decayed:
                loss += l2_penalty(weight_decay, decayed) / strategy.num_replicas_in_sync
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, variables)
        finite = tf.math.is_finite(loss)
        if not loss_scaled:
            finite = tf.reduce_all([finite] + [tf.reduce_all(tf.math.is_finite(g)) for g in grads])
        predictions = tf.argmax(logits, -1, output_type=tf.int32)
        return loss, 1 - tf.cast(finite, tf.int32), grads, predictions

    def update(grads):
        optimizer.apply_gradients(zip(grads, variables))

    @tf.function(jit_compile=jit_compile)
    def train_step(batch):
        images, labels = batch
        loss, bad, grads, predictions = strategy.run(forward_backward, args=(images, labels))
        loss = strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)
        # ReduceOp has no MIN: count the replicas with a non-finite value instead.
        finite = strategy.reduce(tf.distribute.ReduceOp.SUM, bad, axis=None) == 0
        before = tf.identity(optimizer.iterations.value)
        if loss_scaled:
            strategy.run(update, args=(grads,))
        else:
            tf.cond(finite, lambda: strategy.run(update, args=(grads,)), lambda: None)
        # Automatic control dependencies order this read after the update above.
        step.assign_add(tf.cast(optimizer.iterations.value - before, tf.int64))
        return loss, finite, strategy.experimental_local_results(predictions)[0]

    return train_step
