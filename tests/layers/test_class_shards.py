"""The many-class head in class shards against the stock head (1x1 conv, bilinear
upsample, softmax cross-entropy) with the same weights, in float64: loss, gradients of
the features, kernel and bias, and predictions; ignore pixels and class weights.

TF's bilinear resize computes in float32 whatever the dtype (tfseg.layers.resize), so
"exact" here is to float32's rounding of the upsampled logits (1e-6), the stock head's
own precision; everything else is float64."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.layers import ClassShards, ShardedLogits, shard_bounds
from tfseg.layers.resize import resize_bilinear

CLASSES = 11
SIZE = (49, 65)  # odd, and not a multiple of the 13x17 features


def _case(seed=0):
    rng = np.random.default_rng(seed)
    features = tf.constant(rng.normal(size=(2, 13, 17, 8)))
    kernel = tf.constant(rng.normal(size=(1, 1, 8, CLASSES)))
    bias = tf.constant(rng.normal(size=(CLASSES,)))
    labels = rng.integers(0, CLASSES, (2, *SIZE)).astype(np.int32)
    labels[0, :10] = 255
    class_weights = rng.uniform(0.5, 2.0, CLASSES)
    weights = np.where(labels == 255, 0.0, class_weights[np.minimum(labels, CLASSES - 1)])
    return features, kernel, bias, tf.constant(labels), tf.constant(weights)


def _stock(features, kernel, bias, labels, weights, align_corners):
    logits = tf.cast(resize_bilinear(tf.nn.conv2d(features, kernel, 1, "SAME") + bias, SIZE,
                                     align_corners), tf.float64)
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(tf.where(labels == 255, 0, labels),
                                                        logits)
    return tf.reduce_sum(weights * ce), tf.argmax(logits, -1, output_type=tf.int32)


def test_shard_bounds_cover_the_classes_evenly():
    assert shard_bounds(11, 3) == [(0, 3), (3, 7), (7, 11)]
    assert shard_bounds(5, 1) == [(0, 5)]
    with pytest.raises(ValueError, match="shards must be in"):
        shard_bounds(5, 6)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("shards", [1, 3, CLASSES])
def test_sharded_head_equals_the_stock_head(shards, align_corners, compiled):
    features, kernel, bias, labels, weights = _case()
    head = ClassShards(shard_bounds(CLASSES, shards), align_corners=align_corners)

    def both(features, kernel, bias):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch([features, kernel, bias])
            stock, expected = _stock(features, kernel, bias, labels, weights, align_corners)
            sharded = head.cross_entropy(features, kernel, bias, labels, weights, SIZE)
        return (stock, sharded, tape.gradient(stock, [features, kernel, bias]),
                tape.gradient(sharded, [features, kernel, bias]), expected,
                head.classes(features, kernel, bias, SIZE))

    run = tf.function(both) if compiled else both
    stock, sharded, want, got, expected, classes = run(features, kernel, bias)
    assert abs(float(stock) - float(sharded)) < 1e-6 * abs(float(stock))
    for name, a, b in zip(("features", "kernel", "bias"), want, got):
        scale = float(tf.reduce_max(tf.abs(a)))
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-6, atol=1e-6 * scale,
                                   err_msg=name)
    np.testing.assert_array_equal(classes.numpy(), expected.numpy())


def test_ties_go_to_the_first_class_as_argmax():
    features = tf.zeros((1, 3, 3, 2), tf.float64)
    kernel, bias = tf.zeros((1, 1, 2, 6), tf.float64), tf.zeros((6,), tf.float64)
    classes = ClassShards(shard_bounds(6, 3)).classes(features, kernel, bias, (5, 5))
    assert np.all(classes.numpy() == 0)


def test_the_head_never_makes_a_full_class_width_activation():
    """Traced with 3 shards: every full-resolution tensor has a shard's classes at most."""
    features, kernel, bias, labels, weights = _case()
    head = ClassShards(shard_bounds(CLASSES, 3))

    @tf.function
    def step(features, kernel, bias):
        with tf.GradientTape() as tape:
            tape.watch([features, kernel, bias])
            loss = head.cross_entropy(features, kernel, bias, labels, weights, SIZE)
        return loss, tape.gradient(loss, [features, kernel, bias]), head.classes(
            features, kernel, bias, SIZE)

    graph = step.get_concrete_function(features, kernel, bias).graph
    widths = [t.shape[-1] for op in graph.get_operations() for t in op.outputs
              if t.shape.rank == 4 and t.shape[1:3] == SIZE]
    assert widths and max(widths) == 4  # classes 3..6, the widest shard
    # The stock head (the check can fail) makes the full width.
    stock = tf.function(lambda f: _stock(f, kernel, bias, labels, weights, False))
    graph = stock.get_concrete_function(features).graph
    assert any(t.shape.rank == 4 and t.shape[-1] == CLASSES and t.shape[1:3] == SIZE
               for op in graph.get_operations() for t in op.outputs)


def test_recompute_waits_for_the_incoming_gradient():
    """The backward pass's logits are made again only after dy exists (else TF runs them
    during the forward pass and keeps them): each shard's first backward op reads dy."""
    features, kernel, bias, labels, weights = _case()
    head = ClassShards(shard_bounds(CLASSES, 2))

    @tf.function
    def step(features, kernel, bias, dy):
        with tf.GradientTape() as tape:
            tape.watch([features, kernel, bias])
            loss = head.cross_entropy(features, kernel, bias, labels, weights, SIZE)
        return tape.gradient(loss, features, output_gradients=dy)

    graph = step.get_concrete_function(features, kernel, bias, tf.constant(1.0, tf.float64)).graph
    dy = graph.inputs[3].op
    memo = {}

    def depends_on_dy(op):
        if op.name not in memo:
            memo[op.name] = False
            memo[op.name] = op is dy or any(depends_on_dy(t.op) for t in op.inputs) or any(
                depends_on_dy(c) for c in op.control_inputs)
        return memo[op.name]

    resizes = [op for op in graph.get_operations() if op.type == "ResizeBilinear"]
    # Two shards: two upsamples in the forward pass, two rebuilt after dy.
    assert len(resizes) == 4
    assert sum(depends_on_dy(op) for op in resizes) == 2


def test_sharded_logits_has_the_conv_variables_and_passes_features_through():
    inputs = keras.Input((None, None, 8))
    layer = ShardedLogits(CLASSES, shards=3, name="logits")
    model = keras.Model(inputs, layer(inputs))
    conv = keras.layers.Conv2D(CLASSES, 1, name="logits")
    keras.Model(inputs, conv(inputs))
    assert [w.path for w in model.weights] == [w.path for w in conv.weights]
    assert [tuple(w.shape) for w in model.weights] == [tuple(w.shape) for w in conv.weights]
    features = np.ones((1, 5, 7, 8), "float32")
    np.testing.assert_array_equal(model(features), features)
    again = ShardedLogits.from_config(layer.get_config())
    assert (again.shards, again.num_classes) == (3, CLASSES)


# A fresh process with oneDNN on (the only CPU allocator that keeps statistics): one
# training step of the head alone, 1,000 classes at 129x129, measured as tfseg's
# memory measurements are (warm-up step, gc, base, reset, step, peak - base), on the
# device they read (tfseg.runtime.device: GPU:0 when there is one).
_MEMORY_SCRIPT = """
import gc, json, sys
import tensorflow as tf
from tfseg.layers import ClassShards, shard_bounds
from tfseg.layers.resize import resize_bilinear
from tfseg.runtime import device
shards = int(sys.argv[1])
rng = tf.random.Generator.from_seed(0)
features = tf.Variable(rng.normal((2, 33, 33, 64)))
kernel = tf.Variable(rng.normal((1, 1, 64, 1000)) * 0.1)
bias = tf.Variable(tf.zeros((1000,)))
labels = tf.cast(rng.uniform((2, 129, 129), 0, 1000), tf.int32)
weights = tf.ones((2, 129, 129))
head = ClassShards(shard_bounds(1000, max(shards, 1)))

@tf.function
def step():
    with tf.GradientTape() as tape:
        if shards:
            loss = head.cross_entropy(features, kernel, bias, labels, weights, (129, 129))
        else:
            logits = resize_bilinear(tf.nn.conv2d(features, kernel, 1, "SAME") + bias, (129, 129))
            loss = tf.reduce_sum(weights * tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels, logits))
    grads = tape.gradient(loss, [features, kernel, bias])
    return loss, tf.add_n([tf.reduce_sum(g) for g in grads])

step()
gc.collect()
base = device.memory_info()["current"]
device.reset_peak()
loss, _ = step()
print(json.dumps({"peak": device.memory_info()["peak"] - base,
                  "loss": float(loss)}))
"""


@pytest.mark.slow  # 10-23 s: more than its share of the fast tier's 12 minutes
@pytest.mark.xdist_group("measure")
def test_the_chunked_head_peaks_below_the_stock_head():
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1", TF_CPP_MIN_LOG_LEVEL="3")
    runs = {}
    for shards in (0, 10):  # 0: the stock head
        proc = subprocess.run([sys.executable, "-c", _MEMORY_SCRIPT, str(shards)], cwd=root,
                              env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs[shards] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert runs[10]["loss"] == pytest.approx(runs[0]["loss"], rel=1e-5)
    # The stock head holds [2, 129, 129, 1000] float32 logits (133 MB) and their
    # gradient (in place); a shard of 100 classes is a tenth of that, and a shard's two
    # full-size tensors (its logits, then their softmax and gradient) live only while it
    # runs. Measured here: 160 MB against 37 MB.
    full = 2 * 129 * 129 * 1000 * 4
    assert runs[0]["peak"] > full
    assert runs[10]["peak"] < runs[0]["peak"] / 3, runs
