"""The loss's and the many-class head's index math on the label map runs in int64.

On a GPU, TF keeps int32 tensors in host memory and runs most int32 kernels (compare,
select, arithmetic, pack, fill) on the CPU: int32 work on a label-sized tensor is CPU
work plus two copies every step. The traced training step therefore holds no int32
tensor as large as the label map, except the labels as they come in (cast to int64
at once) and the predicted classes (`ArgMax`, whose GPU kernel writes int32 to
device memory) as they go out."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.layers import LogitsResize, ShardedLogits
from tfseg.training import losses
from tfseg.training.step import make_train_step

BATCH, SIZE, CLASSES = 2, (33, 41), 5
LABEL_PIXELS = BATCH * SIZE[0] * SIZE[1]
# Ops allowed an int32 tensor of the label map's size, and where: the labels coming in
# (the step's argument, read once by a Cast), the predictions going out (ArgMax, a
# Cast of the sharded head's int64 argmax, and the Identity that returns them).
ALLOWED = {"Placeholder", "Cast", "ArgMax", "Identity"}


def _model(head):
    inputs = keras.Input((*SIZE, 3))
    if head == "class_shards":
        features = keras.layers.Conv2D(6, 3, strides=4, padding="same")(inputs)
        outputs = ShardedLogits(CLASSES, shards=2, name="logits")(features)
    elif head == "resized":  # a memory-saving model's: the loss takes the small logits
        logits = keras.layers.Conv2D(CLASSES, 3, strides=4, padding="same")(inputs)
        outputs = LogitsResize(name="logits_resize")([logits, inputs])
    else:
        outputs = keras.layers.Conv2D(CLASSES, 3, padding="same")(inputs)
    return keras.Model(inputs, outputs)


def _graphs(graph):
    """The graph and the function bodies it calls (a cond's branches), recursively."""
    yield graph
    for function in getattr(graph, "_functions", {}).values():
        inner = getattr(function, "graph", None)
        if inner is not None:
            yield from _graphs(inner)


def _label_sized_int32(step, images, labels):
    """(op type, op name) of every op with an int32 input or output of at least the
    label map's element count, in the traced step."""
    concrete = step.get_concrete_function((images, labels))
    found = []
    for graph in _graphs(concrete.graph):
        for op in graph.get_operations():
            for tensor in list(op.inputs) + list(op.outputs):
                count = tensor.shape.num_elements()
                if tensor.dtype == tf.int32 and count is not None and count >= LABEL_PIXELS:
                    found.append((op.type, op.name))
                    break
    return found


def _int32_consumers(step, images, labels):
    """The ops reading the labels argument (an int32 tensor)."""
    graph = step.get_concrete_function((images, labels)).graph
    label_input = [t for t in graph.inputs if t.dtype == tf.int32 and
                   t.shape.num_elements() == LABEL_PIXELS]
    return sorted({op.type for t in label_input for op in t.consumers()})


HEADS = ["stock_head", "class_shards", "resized"]


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("class_weights", [(), (1.0, 2.0, 0.5, 1.0, 3.0)],
                         ids=["unweighted", "class_weights"])
def test_the_step_does_no_int32_work_on_the_label_map(head, class_weights):
    model = _model(head)
    loss = losses.for_model(model, class_weights, resized=True)
    optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
    step = tf.Variable(0, dtype=tf.int64)
    train_step = make_train_step(tf.distribute.get_strategy(), model, optimizer, loss, step)
    images = tf.TensorSpec((BATCH, *SIZE, 3), tf.uint8)
    labels = tf.TensorSpec((BATCH, *SIZE), tf.int32)
    found = _label_sized_int32(train_step, images, labels)
    assert found and not [f for f in found if f[0] not in ALLOWED], found
    # The labels are read once, by their cast to int64.
    assert _int32_consumers(train_step, images, labels) == ["Cast"]


@pytest.mark.parametrize("head", HEADS)
def test_int64_labels_give_the_same_loss_as_int32(head):
    """int32, int64 and float labels ([N, H, W] or [N, H, W, 1]) are the same classes."""
    model = _model(head)
    loss = losses.for_model(model, (1.0, 2.0, 0.5, 1.0, 3.0), resized=True)
    rng = np.random.default_rng(0)
    labels = rng.integers(0, CLASSES, (BATCH, *SIZE))
    labels[0, :5] = 255
    images = tf.constant(rng.uniform(0, 255, (BATCH, *SIZE, 3)), tf.float32)
    logits = loss.logits_of(model, images)
    values = [float(loss(tf.constant(labels, dtype), logits)) for dtype in
              (tf.int32, tf.int64, tf.float32)]
    values.append(float(loss(tf.constant(labels[..., None], tf.int32), logits)))
    assert values[0] > 0 and values == [values[0]] * 4, values


@pytest.mark.slow  # 14-19 s each alone (tests/layers/test_resized_loss.py: the op's own)
@pytest.mark.parametrize("output_stride,norm,resize", [(16, "batch", "half_pixel"),
                                                       (8, "group", "align_corners")])
def test_a_memory_saving_step_takes_the_small_logits_and_updates_as_stock(
        output_stride, norm, resize, float64):
    """The rewrite's `LogitsResize` gives tfseg's step a `ResizedPixelLoss`, which resizes
    the logits inside the cross-entropy: one step of it moves every weight as stock's
    step does (float64), and its predictions are stock's."""
    from tfseg import memory
    from tfseg.models import deeplab_v3_plus
    from tests.conftest import TINY

    kwargs = dict(output_stride=output_stride, norm=norm, resize=resize, dropout=0.0,
                  **{**TINY, "middle_repeats": 1})
    stock = deeplab_v3_plus(CLASSES, **kwargs)
    saving = memory.rewrite(stock)
    saving_loss = losses.for_model(saving, (1.0, 2.0, 0.5, 1.0, 3.0), resized=True)
    assert type(saving_loss) is losses.ResizedPixelLoss
    assert type(losses.for_model(stock, resized=True)) is losses.PixelLoss
    assert type(losses.for_model(saving)) is losses.PixelLoss  # a split model's
    rng = np.random.default_rng(0)
    images = tf.constant(rng.integers(0, 256, (BATCH, 37, 51, 3)), tf.uint8)
    labels = rng.integers(0, CLASSES, (BATCH, 37, 51))
    labels[1, 3:9] = 255
    batch = (images, tf.constant(labels, tf.int32))
    results, initial = [], stock.get_weights()
    for model, loss in ((stock, losses.PixelLoss((1.0, 2.0, 0.5, 1.0, 3.0))),
                        (saving, saving_loss)):
        stock.set_weights(initial)  # the layers the rewrite kept are stock's own
        start = [w.numpy() for w in model.trainable_weights]
        step = make_train_step(tf.distribute.get_strategy(), model,
                               keras.optimizers.SGD(0.1), loss, tf.Variable(0, dtype=tf.int64))
        value, finite, predictions = step(batch)
        moved = {w.path: w.numpy() - s for w, s in zip(model.trainable_weights, start)}
        results.append((float(value), bool(finite), predictions.numpy(), moved))
    (want_loss, _, want_classes, want), (got_loss, finite, got_classes, got) = results
    assert finite and abs(got_loss - want_loss) <= 1e-12 * want_loss
    assert (got_classes == want_classes).all() and got_classes.shape == (BATCH, 37, 51)
    scale = max(np.abs(v).max() for v in want.values())
    for path, delta in want.items():
        np.testing.assert_allclose(got[path], delta, rtol=0, atol=1e-12 * scale, err_msg=path)
