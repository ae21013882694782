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

from tfseg.layers import ShardedLogits
from tfseg.training import losses
from tfseg.training.step import make_train_step

BATCH, SIZE, CLASSES = 2, (33, 41), 5
LABEL_PIXELS = BATCH * SIZE[0] * SIZE[1]
# Ops allowed an int32 tensor of the label map's size, and where: the labels coming in
# (the step's argument, read once by a Cast), the predictions going out (ArgMax, a
# Cast of the sharded head's int64 argmax, and the Identity that returns them).
ALLOWED = {"Placeholder", "Cast", "ArgMax", "Identity"}


def _model(sharded):
    inputs = keras.Input((*SIZE, 3))
    if sharded:
        features = keras.layers.Conv2D(6, 3, strides=4, padding="same")(inputs)
        outputs = ShardedLogits(CLASSES, shards=2, name="logits")(features)
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


@pytest.mark.parametrize("sharded", [False, True], ids=["stock_head", "class_shards"])
@pytest.mark.parametrize("class_weights", [(), (1.0, 2.0, 0.5, 1.0, 3.0)],
                         ids=["unweighted", "class_weights"])
def test_the_step_does_no_int32_work_on_the_label_map(sharded, class_weights):
    model = _model(sharded)
    loss = losses.for_model(model, class_weights)
    optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
    step = tf.Variable(0, dtype=tf.int64)
    train_step = make_train_step(tf.distribute.get_strategy(), model, optimizer, loss, step)
    images = tf.TensorSpec((BATCH, *SIZE, 3), tf.uint8)
    labels = tf.TensorSpec((BATCH, *SIZE), tf.int32)
    found = _label_sized_int32(train_step, images, labels)
    assert found and not [f for f in found if f[0] not in ALLOWED], found
    # The labels are read once, by their cast to int64.
    assert _int32_consumers(train_step, images, labels) == ["Cast"]


@pytest.mark.parametrize("sharded", [False, True], ids=["stock_head", "class_shards"])
def test_int64_labels_give_the_same_loss_as_int32(sharded):
    """int32, int64 and float labels ([N, H, W] or [N, H, W, 1]) are the same classes."""
    model = _model(sharded)
    loss = losses.for_model(model, (1.0, 2.0, 0.5, 1.0, 3.0))
    rng = np.random.default_rng(0)
    labels = rng.integers(0, CLASSES, (BATCH, *SIZE))
    labels[0, :5] = 255
    logits = model(tf.constant(rng.uniform(0, 255, (BATCH, *SIZE, 3)), tf.float32))
    values = [float(loss(tf.constant(labels, dtype), logits)) for dtype in
              (tf.int32, tf.int64, tf.float32)]
    values.append(float(loss(tf.constant(labels[..., None], tf.int32), logits)))
    assert values[0] > 0 and values == [values[0]] * 4, values
