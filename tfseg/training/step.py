"""The distributed training step: ``strategy.run`` of forward, backward and update."""

import keras
import tensorflow as tf

from tfseg.layers.gating import gated
from tfseg.training.guard import kept_unless, selects
from tfseg.training.l2 import l2_penalty, with_l2
from tfseg.models import normalize
from tfseg.split import PlacedModel
from tfseg.xla import Blocks, tf_variables


def make_train_step(strategy, model, optimizer, loss_fn, step, jit_compile="off",
                    weight_decay=0.0, decayed=(), accum_steps=1, guard="cond", block_of=None):
    """A tf.function: one distributed batch -> (loss, finite flag, replica 0's predictions).

    A batch is (images uint8 [B, H, W, 3], labels int32 [B, H, W]), as
    ``tfseg.data.build_dataset`` makes them (float 0-255 images work too).
    Each replica normalises its images (``tfseg.models.normalize``) on its own
    device, so the host->device copy carries 1 byte a channel, not 4.

    The loss is ``loss_fn``'s plus, with ``decayed`` kernels, ``l2_penalty``:
    each replica adds its share, so the summed gradients hold it once.

    Gradients are computed in one ``strategy.run`` and applied in a second one;
    unless the loss and every gradient on every replica are finite, the update
    leaves the weights, the momentum and ``optimizer.iterations`` as they were.
    ``guard``: "select" writes ``tf.where(finite, new, old)`` to each (``selects``
    says which optimizers it covers); "cond" applies the update in a ``tf.cond``,
    whose predicate a GPU must copy to the host (``Switch`` and ``If`` take it in
    host memory). "auto": "select" where it covers the optimizer, else "cond".
    "cond" is the default because it measured faster on a GPU (the select form makes an
    extra pass over the weights and slots), and the predicate's trip to the host kept no
    step from being queued (docs/benchmarks.md, `guard_check.py`). The cond sits in
    the cross-replica context because tf.distribute cannot ``merge_call`` (which
    ``apply_gradients`` does) from a cond inside a replica. Under ``mixed_float16``
    the ``LossScaleOptimizer`` does its own skipping of overflowing steps (with a
    cond), so only the loss is checked. The caller stops the run on a non-finite loss.

    ``step`` (an int64 variable) counts applied updates: it moves by exactly as much as
    ``optimizer.iterations``, which drives the learning-rate schedule and does not move when
    the loss-scale optimizer skips an update. Counting calls instead would run the step
    (checkpoint names, --train_steps) ahead of the schedule by every skipped update.

    ``accum_steps`` N > 1: the step takes a list of N batches (micro-batches) and makes one
    update of their summed gradients. Each replica runs them one after the other (the next
    forward waits for the gradients before it, so one micro-batch's activations are alive at
    a time) and sums its own gradients; the optimizer then sums the replicas'. Every
    micro-batch's loss is divided by the labelled-pixel count of all N, over all replicas,
    and the L2 term is added 1/N times, so the update is that of one batch of N x B
    (exactly, with frozen batch norm and no dropout; training-mode batch norm normalises
    each micro-batch by its own statistics). The loss returned is the N micro-batches'; the
    predictions are the last one's.

    A ``tfseg.split.PlacedModel`` (a model split across devices) runs each layer's
    forward and backward ops on its part's device, and the loss on the last part's.

    ``jit_compile``: "off", "step" (the whole step one XLA computation) or "blocks": the
    model runs as ``tfseg.xla.Blocks`` (``block_of(layer)`` names a layer's block; None:
    each layer its own), and the loss, the L2 term with the finite check, and the update are
    each one more XLA computation, so that a step is a few launches per block. The guard is
    then "select" where it covers the optimizer: no predicate goes to the host. (True and
    False are "step" and "off".)
    """
    if accum_steps < 1:
        raise ValueError(f"accum_steps must be >= 1, got {accum_steps}")
    mode, select = _mode_and_select(jit_compile, guard, optimizer, model.trainable_variables)
    parts = _TrainStep(strategy, model, optimizer, loss_fn, step, weight_decay, tuple(decayed),
                       accum_steps, select)
    if mode == "blocks":
        parts.compile_blocks(block_of)
    return tf.function(parts.train_step, jit_compile=mode == "step")


def _mode_and_select(jit_compile, guard, optimizer, variables):
    """("off" | "step" | "blocks", whether the update's guard writes selects) of
    `make_train_step`'s arguments: True and False are "step" and "off"; under
    "blocks" a "cond" guard is "auto", since a cond's predicate would go to the host
    between two launches."""
    if guard not in ("auto", "select", "cond"):
        raise ValueError(f'guard must be "auto", "select" or "cond", got {guard!r}')
    mode = {True: "step", False: "off"}.get(jit_compile, jit_compile)
    if mode not in ("off", "step", "blocks"):
        raise ValueError(f'jit_compile must be "off", "step" or "blocks", got {jit_compile!r}')
    guard = "auto" if mode == "blocks" and guard == "cond" else guard
    select = selects(optimizer, variables) and guard != "cond"
    if guard == "select" and not select:
        raise ValueError(f"guard='select' does not cover {type(optimizer).__name__} as "
                         f"configured (tfseg.training.guard.selects)")
    return mode, select


class _TrainStep:
    """The parts of ``make_train_step``'s step, each one stage of it."""

    def __init__(self, strategy, model, optimizer, loss_fn, step, weight_decay, decayed,
                 accum_steps, select):
        self.strategy, self.model, self.optimizer = strategy, model, optimizer
        self.loss_fn = loss_fn
        self.step, self.weight_decay, self.decayed = step, weight_decay, decayed
        self.accum_steps, self.select = accum_steps, select
        self.loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        self.variables = model.trainable_variables
        self.placed = isinstance(model, PlacedModel)  # split across devices (tfseg.split)
        self.blocks = None  # tfseg.xla.Blocks of the model, under --jit_compile=blocks
        self.loss_of, self.regularized, self.count_bad = self.loss, self.add_l2, self.bad
        self.apply = self.update

    def compile_blocks(self, block_of):
        """Runs the model as XLA blocks and each of the step's other stages as one XLA
        computation (``make_train_step``'s ``jit_compile="blocks"``)."""
        if self.placed:
            raise ValueError("jit_compile='blocks' does not place a split model's parts")
        self.blocks = Blocks(self.loss_fn.logits_model_of(self.model), block_of)

        def compiled(fn):
            return tf.function(fn, jit_compile=True, autograph=False)

        self.loss_of, self.regularized = compiled(self.loss), compiled(self.add_l2)
        self.count_bad, self.apply = compiled(self.bad), compiled(self.update)
        self.apply_kept = compiled(self.update_kept)
        if not self.optimizer.built:  # its slots are made here, not inside a compiled update
            with self.strategy.scope():
                self.optimizer.build(self.variables)

    def forward_backward(self, images, labels, count=None, after=None):
        """(loss, gradients, logits) of one (micro-)batch; ``after``: gradients to wait for."""
        model, loss_fn, optimizer, variables = (self.model, self.loss_fn, self.optimizer,
                                                self.variables)
        inputs = normalize(images)
        if after is not None:
            # The next micro-batch's forward pass waits for this one's gradients (the
            # first, the stem's, is the last the backward pass reaches), so the two
            # micro-batches' activations are never alive at once.
            inputs = gated(inputs, after, always_data=True)
        if self.placed:
            # tf.gradients puts each gradient op on its forward op's device; a tape
            # would put the whole backward pass on the default device.
            logits = model(inputs, training=True)
            with tf.device(model.devices[-1]):
                loss = loss_fn(labels, logits, count=count)
                scaled = optimizer.scale_loss(loss)
            grads = tf.gradients(scaled, [v.value for v in variables])
        else:
            with tf.GradientTape() as tape:
                if self.blocks is None:
                    logits = loss_fn.logits_of(model, inputs)  # the model's output, or before
                else:
                    logits = self.blocks(inputs)
                loss = self.loss_of(labels, logits, count)
                scaled = optimizer.scale_loss(loss)
            if self.blocks is None:
                grads = tape.gradient(scaled, variables)
            else:
                # The blocks' backward passes are built now (``Blocks.backward``); the
                # sources are TF's variables, taken before the blocks repoint Keras's.
                sources = tf_variables(variables)
                with self.blocks.backward():
                    grads = tape.gradient(scaled, sources)
        if self.decayed:
            loss, grads = self.regularized(loss, grads)
        return loss, grads, logits

    def loss(self, labels, logits, count):
        """The loss of a (micro-)batch, divided by ``count`` labelled pixels (None: its own;
        a keyword: the loss's third argument is Keras's ``sample_weight``)."""
        return self.loss_fn(labels, logits, count=count)

    def add_l2(self, loss, grads):
        """(loss, grads) with this replica's share of the L2 term (``l2_penalty``)."""
        share = self.weight_decay / (self.strategy.num_replicas_in_sync * self.accum_steps)
        loss += l2_penalty(share, self.decayed)
        # Scaled as the loss is (the loss-scale optimizer unscales them all).
        return loss, with_l2(grads, self.variables, self.decayed,
                             self.optimizer.scale_loss(tf.constant(share)))

    def bad(self, loss, grads):
        """1 where ``loss`` (or, without a loss-scale optimizer, a gradient) is not
        finite, else 0."""
        finite = tf.math.is_finite(loss)
        if not self.loss_scaled:
            finite = tf.reduce_all([finite] + [tf.reduce_all(tf.math.is_finite(g)) for g in grads])
        return 1 - tf.cast(finite, tf.int32)

    def replica_step(self, micro):
        """Forward and backward of this replica's micro-batches [(images, labels)]."""
        if len(micro) == 1:
            loss, grads, logits = self.forward_backward(*micro[0])
        else:
            count = self.loss_fn.count(*[labels for _, labels in micro])
            loss, grads = 0.0, None
            for images, labels in micro:
                part, part_grads, logits = self.forward_backward(images, labels, count, grads)
                loss += part
                grads = part_grads if grads is None else [
                    a + b for a, b in zip(grads, part_grads)]
        bad = self.count_bad(loss, grads)
        with tf.control_dependencies(grads if self.loss_fn.predict_after_backward else []):
            predictions = self.loss_fn.classes(logits, tf.shape(micro[-1][0])[1:3])
        return loss, bad, grads, predictions

    def update(self, grads, finite=None):
        optimizer, variables = self.optimizer, self.variables
        if finite is None:
            optimizer.apply_gradients(zip(grads, variables))
            return
        if not optimizer.built:  # its slots' initial values must not wait for the check
            with keras.name_scope(optimizer.name, caller=optimizer):
                optimizer.build(variables)
        # Nothing of the update runs before the check, as in a cond: else the executor
        # reads every momentum slot and scales it (m * momentum needs no gradient) at
        # the step's start, and a slot-sized copy of each waits through the backward pass
        # (MirroredStrategy's merge_call keeps the dependency: mirrored_run.py).
        with tf.control_dependencies([finite]):
            optimizer.apply_gradients(zip(grads, variables))  # counted: not if skipped
            optimizer.iterations.assign_add(tf.cast(finite, tf.int64) - 1)

    def update_kept(self, grads, finite):
        """``update`` written through selects on ``finite`` (``kept_unless``), which is
        this function's own argument: compiled, it is traced once for every step graph."""
        with kept_unless(self.optimizer, finite):
            self.update(grads, finite)

    def train_step(self, batch):
        strategy, optimizer = self.strategy, self.optimizer
        micro = [batch] if self.accum_steps == 1 else list(batch)
        if len(micro) != self.accum_steps:
            raise ValueError(f"the step takes {self.accum_steps} micro-batches, got {len(micro)}")
        loss, bad, grads, predictions = strategy.run(self.replica_step, args=(micro,))
        loss = strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)
        # ReduceOp has no MIN: count the replicas with a non-finite value instead.
        finite = strategy.reduce(tf.distribute.ReduceOp.SUM, bad, axis=None) == 0
        before = tf.identity(optimizer.iterations.value)
        if self.loss_scaled:
            strategy.run(self.apply, args=(grads,))
        elif self.select and self.blocks is not None:
            strategy.run(self.apply_kept, args=(grads, finite))
        elif self.select:
            with kept_unless(optimizer, finite):
                strategy.run(self.apply, args=(grads, finite))
        else:
            tf.cond(finite, lambda: strategy.run(self.apply, args=(grads,)), lambda: None)
        # Automatic control dependencies order this read after the update above.
        self.step.assign_add(tf.cast(optimizer.iterations.value - before, tf.int64))
        return loss, finite, strategy.experimental_local_results(predictions)[0]
