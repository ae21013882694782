"""What training compiles with: the per-pixel loss (tfseg's step and ``model.compile``'s)
and the mIoU metric, as ``model.fit`` takes them."""

import keras
import tensorflow as tf

from tfseg import keras_graph
from tfseg.data import IGNORE_LABEL
from tfseg.layers import LogitsResize, ShardedLogits, resized_cross_entropy
from tfseg.layers.resize import resize_bilinear
from tfseg.memory.segments import producer


@keras.saving.register_keras_serializable(package="tfseg")
class PixelLoss(keras.losses.Loss):
    """Cross-entropy over labelled pixels, weighted by class, normalised over the *global* batch.

    The loss of tfseg's training step (``tfseg.training.step.make_train_step``) and, as a
    ``keras.losses.Loss``, of ``model.compile(loss=PixelLoss(...))``: the same object
    and the same maths on either path. It returns ``sum(weight * ce) / sum(weight)``,
    where ``ce`` is the softmax cross-entropy of each pixel's logits and ``weight`` is 0
    at label 255 (``IGNORE_LABEL``), else the pixel's class weight (1 without
    ``class_weights``) times its ``sample_weight``. Under a ``tf.distribute`` strategy
    with several replicas, ``sum(weight)`` is all-reduced over them, so the summed
    gradients are those of one device seeing the whole batch, whatever the split of
    labelled pixels. A batch with no labelled pixel has loss 0.

    Args:
      class_weights: one weight per class (``--class_weights``), or () for 1 each.
      name: the loss's name (``fit`` logs it as ``loss``).

    Call: ``loss(labels, logits, sample_weight=None, count=None)``.
      labels: int class ids [N, H, W] or [N, H, W, 1]; 255 is ignored.
      logits: float [N, H, W, C] at the labels' size. Smaller logits (a stride-4
        head, say) are refused: a ValueError naming both shapes when they are known
        at tracing, else an InvalidArgumentError when it runs (under XLA, which
        drops assertions, the cross-entropy's "Incompatible shapes"). tfseg's step
        never resizes logits (its model upsamples them to the input size inside,
        ``logits_resize``), so neither does this loss: put the resize in the model,
        so that ``predict`` gives full-size maps too.
      sample_weight: optional weights [N] (per image) or [N, H, W] (per pixel),
        multiplying the class weights, numerator and denominator alike.
      count: the denominator to use instead of this batch's ``sum(weight)`` (the step
        passes that of all its micro-batches, ``count(...)``).
    Returns a float scalar.
    """

    predict_after_backward = False  # the full-size logits would wait through it

    def __init__(self, class_weights=(), name="pixel_loss"):
        # reduction="sum" only labels what comes out (one scalar): __call__ reduces itself.
        super().__init__(name=name, reduction="sum")
        self.class_weights = tuple(float(w) for w in class_weights)
        self._weight_table = (tf.constant(self.class_weights, tf.float32)
                              if self.class_weights else None)
        # reduction="sum": the normalisation is done here, across replicas.
        self.cross_entropy = keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, ignore_class=IGNORE_LABEL, reduction="sum")

    def weights(self, labels, sample_weight=None):
        """Each pixel's weight in the loss (float32, the shape of ``labels`` [N, H, W])."""
        labels = _class_ids(labels)
        weights = tf.cast(tf.not_equal(labels, IGNORE_LABEL), tf.float32)
        if self._weight_table is not None:
            safe = tf.where(labels == IGNORE_LABEL, tf.zeros_like(labels), labels)
            weights *= tf.gather(self._weight_table, safe)
        if sample_weight is not None:
            sample_weight = tf.cast(sample_weight, tf.float32)
            if sample_weight.shape.rank == 4:
                sample_weight = tf.squeeze(sample_weight, -1)
            if sample_weight.shape.rank == 1:  # one weight per image
                sample_weight = sample_weight[:, None, None]
            weights *= sample_weight
        return weights

    def count(self, *labels):
        """The loss weights' sum over ``labels`` (batches [B, H, W]) and over the replicas:
        the loss's denominator, float32."""
        return _over_replicas(tf.add_n([tf.reduce_sum(self.weights(batch)) for batch in labels]))

    def __call__(self, y_true, y_pred, sample_weight=None, count=None):
        # Not Keras' __call__: that casts the labels to float and applies sample_weight
        # after the reduction, where the normalisation needs it in the denominator.
        with tf.name_scope(self.name):
            return self.call(y_true, y_pred, sample_weight, count)

    def call(self, y_true, y_pred, sample_weight=None, count=None):
        """The loss of ``y_pred`` (logits) at ``y_true`` (labels); see the class."""
        labels = _class_ids(y_true)
        logits = tf.convert_to_tensor(y_pred)
        labels, logits = _require_same_size(labels, logits)
        weights = self.weights(labels, sample_weight)
        total = self.cross_entropy(labels, logits, sample_weight=weights)
        count = _over_replicas(tf.reduce_sum(weights)) if count is None else count
        return total / tf.maximum(tf.cast(count, total.dtype), 1.0)

    def classes(self, y_pred, size=None):
        """The predicted class of each pixel [N, H, W] (int32) from the model's output."""
        return tf.argmax(y_pred, -1, output_type=tf.int32)

    def logits_of(self, model, inputs):
        """What tfseg's training step gives this loss as ``y_pred``: ``model``'s output."""
        return self.logits_model_of(model)(inputs, training=True)

    def logits_model_of(self, model):
        """The functional model whose output ``logits_of`` gives: ``model`` itself."""
        return model

    def get_config(self):
        return {"class_weights": list(self.class_weights), "name": self.name}


class ShardedPixelLoss(PixelLoss):
    """``PixelLoss`` of a model whose head is a ``tfseg.layers.ShardedLogits`` (the
    many-class head): the model's output is the head's input features at stride 4, and
    the cross-entropy of the upsampled logits is taken in class shards, never holding
    all classes' logits (``tfseg.layers.class_shards``). The same value and gradients as
    ``PixelLoss`` of the stock head with the same weights.

    Args:
      head: the model's ``ShardedLogits`` layer.
      class_weights, name: as ``PixelLoss``'s.
    """

    def __init__(self, head, class_weights=(), name="pixel_loss"):
        super().__init__(class_weights, name)
        self.head = head

    def call(self, y_true, y_pred, sample_weight=None, count=None):
        labels = _class_ids(y_true)
        weights = self.weights(labels, sample_weight)
        total = self.head.cross_entropy(y_pred, labels, weights)
        count = _over_replicas(tf.reduce_sum(weights)) if count is None else count
        return total / tf.maximum(tf.cast(count, total.dtype), 1.0)

    def classes(self, y_pred, size=None):
        return self.head.classes(y_pred, size)


class ResizedPixelLoss(PixelLoss):
    """``PixelLoss`` of a model whose output is a ``tfseg.layers.LogitsResize`` (a
    memory-saving model's): tfseg's step gives it the logits before that resize
    (``logits_of``), and it resizes them inside ``tfseg.layers.resized_cross_entropy``,
    which keeps the small logits, not a full-size tensor of class scores. The same value
    and gradients as ``PixelLoss`` of the model's output.

    Args:
      model: the model (functional), whose output layer is a ``LogitsResize``.
      class_weights, name: as ``PixelLoss``'s.
    """

    # The step predicts once the gradients exist: the resize to full size would else
    # sit at the loss's peak, beside what the forward pass keeps.
    predict_after_backward = True

    def __init__(self, model, class_weights=(), name="pixel_loss"):
        super().__init__(class_weights, name)
        node = _output_node(model)
        self.model, self.align_corners = model, node.operation.align_corners
        # The same layers, up to the resize's input: shares the model's variables.
        self.logits_model = keras.Model(model.inputs, node.input_tensors[0], name=model.name)

    def logits_model_of(self, model):
        """The model up to the resize's input (``logits_model``), for ``model`` only."""
        if model is not self.model:
            raise ValueError(f"{self.name}: made for {self.model.name}, given another model")
        return self.logits_model

    def call(self, y_true, y_pred, sample_weight=None, count=None):
        labels = _class_ids(y_true)
        weights = self.weights(labels, sample_weight)
        logits = tf.convert_to_tensor(y_pred)
        if logits.dtype != tf.float64:  # 16-bit logits: the full-size sums in float32
            logits = tf.cast(logits, tf.float32)
        total = resized_cross_entropy(logits, labels, weights, self.align_corners)
        count = _over_replicas(tf.reduce_sum(weights)) if count is None else count
        return total / tf.maximum(tf.cast(count, total.dtype), 1.0)

    def classes(self, y_pred, size=None):
        return tf.argmax(resize_bilinear(y_pred, size, self.align_corners), -1,
                         output_type=tf.int32)


def for_model(model, class_weights=(), resized=False):
    """The loss of ``model``'s output: ``ShardedPixelLoss`` when its head is a
    ``tfseg.layers.ShardedLogits``; ``ResizedPixelLoss`` when ``resized`` (tfseg's step
    on an unsplit model: it calls ``logits_of``) and its output is a
    ``tfseg.layers.LogitsResize`` (the memory rewrite's, ``lean_upsampling``); else
    ``PixelLoss``."""
    heads = [layer for layer in model.layers if isinstance(layer, ShardedLogits)]
    if heads:
        return ShardedPixelLoss(heads[0], class_weights)
    if resized and _output_node(model) is not None:
        return ResizedPixelLoss(model, class_weights)
    return PixelLoss(class_weights)


def _output_node(model):
    """The node making a functional ``model``'s single output where its layer is a
    ``LogitsResize``, else None."""
    if not isinstance(model, keras.Model) or len(model.outputs or ()) != 1:
        return None
    if not keras_graph.has_history(model.outputs[0]):
        return None
    node = producer(model.outputs[0])
    return node if isinstance(node.operation, LogitsResize) else None


def mean_iou(num_classes, name="mean_iou"):
    """Keras' own ``MeanIoU`` for ``model.compile(metrics=[...])`` on tfseg's logits.

    ``sparse_y_pred=False`` takes the argmax of the logits [N, H, W, C] over the last
    axis; labels [N, H, W] (or [N, H, W, 1]) equal to 255 are left out of the
    confusion matrix, and classes neither labelled nor predicted out of the mean, as
    tfseg's evaluation (``tfseg.evaluation.metrics``) counts them. Like every Keras
    metric it accumulates over an epoch and restarts at the next.
    """
    return keras.metrics.MeanIoU(num_classes, name=name, ignore_class=IGNORE_LABEL,
                                 sparse_y_true=True, sparse_y_pred=False)


def _class_ids(labels):
    """int64 labels [N, H, W] from int or float [N, H, W] or [N, H, W, 1].

    int64, not int32: on a GPU, TF keeps int32 tensors (and runs the int32 compare,
    select and arithmetic kernels) in host memory, so int32 index math on the label
    map is CPU work and two copies every step; int64 stays on the device.
    """
    labels = tf.convert_to_tensor(labels)
    if labels.shape.rank == 4 and labels.shape[-1] == 1:
        labels = tf.squeeze(labels, -1)
    return labels if labels.dtype == tf.int64 else tf.cast(labels, tf.int64)


def _require_same_size(labels, logits):
    """(labels, logits), refused when their sizes differ; where the sizes are known only
    when it runs, the two come out of the check, so nothing reads them before it."""
    if labels.shape.rank != 3 or logits.shape.rank != 4:
        raise ValueError(f"tfseg.training.PixelLoss: wants labels [N, H, W] or [N, H, W, 1] and "
                         f"logits [N, H, W, C], got {labels.shape} and {logits.shape}")
    message = ("tfseg.training.PixelLoss: the logits are not at the size of the labels; resize "
               "them to it in the model (tfseg's step never resizes logits in the loss)")
    if not labels.shape.is_compatible_with(logits.shape[:-1]):
        raise ValueError(f"{message}: logits {logits.shape}, labels {labels.shape}")
    if not (labels.shape.is_fully_defined() and logits.shape.is_fully_defined()):
        # Sizes known only when it runs (a model of any input size): checked then, and
        # first. An assert that nothing waits for races the ops after it, and a
        # broadcasting error of theirs would hide this message.
        check = tf.debugging.assert_equal(tf.shape(logits)[:-1], tf.shape(labels),
                                          message=message)
        with tf.control_dependencies([check]):
            return tf.identity(labels), tf.identity(logits)
    return labels, logits


def _over_replicas(count):
    """``count`` summed over the replicas of the current strategy (itself with one)."""
    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
        count = context.all_reduce(tf.distribute.ReduceOp.SUM, count)
    return count
