"""`resized_cross_entropy` against its stock composition (resize, then TF's softmax
cross-entropy), and what it keeps."""

import numpy as np
import pytest
import tensorflow as tf

from tfseg.layers import LogitsResize, ResizeLike, resized_cross_entropy
from tfseg.layers.resize import resize_bilinear
from tfseg.memory.kept import kept_tensors
from tests.layers.twins import ancestors

SMALL, FULL, CLASSES = (2, 9, 13), (2, 33, 49), 5


def _inputs(dtype, seed=0):
    rng = np.random.RandomState(seed)
    small = tf.constant(rng.randn(*SMALL, CLASSES) * 3, dtype)
    labels = rng.randint(0, CLASSES, FULL)
    labels[0, :7] = 255  # ignored: weight 0
    weights = rng.uniform(0.5, 2.0, FULL) * (labels != 255)
    return small, tf.constant(labels, tf.int64), tf.constant(weights, dtype)


def _stock(small, labels, weights, align_corners):
    full = tf.cast(resize_bilinear(small, FULL[1:], align_corners), small.dtype)
    safe = tf.where(labels == 255, tf.zeros_like(labels), labels)
    per_pixel = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=safe, logits=full)
    return tf.reduce_sum(weights * per_pixel)


def _value_and_gradient(loss, small, labels, weights, align_corners, compiled=False):
    def run(small):
        with tf.GradientTape() as tape:
            tape.watch(small)
            value = loss(small, labels, weights, align_corners)
        return value, tape.gradient(value, small)

    return (tf.function(run, jit_compile=True) if compiled else run)(small)


@pytest.mark.parametrize("align_corners", [False, True], ids=["half_pixel", "align_corners"])
def test_value_and_gradient_are_stocks_in_float64(align_corners):
    small, labels, weights = _inputs(tf.float64)
    want = _value_and_gradient(_stock, small, labels, weights, align_corners)
    got = _value_and_gradient(resized_cross_entropy, small, labels, weights, align_corners)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
    scale = np.abs(want[1]).max()
    np.testing.assert_allclose(got[1], want[1], rtol=0, atol=1e-13 * scale)
    assert np.abs(got[1]).max() > 0


def test_compiled_float32_is_as_close_as_uncompiled():
    """Under XLA the resize runs as interpolation matrices (`resize_bilinear`): the same
    maths, so the compiled float32 gradient is within float32 rounding of float64's."""
    small, labels, weights = _inputs(tf.float64)
    want = _value_and_gradient(_stock, small, labels, weights, False)[1].numpy()
    cast = [tf.cast(t, tf.float32) if t.dtype == tf.float64 else t for t in (small, labels,
                                                                          weights)]
    for compiled in (False, True):
        got = _value_and_gradient(resized_cross_entropy, *cast, False, compiled)[1].numpy()
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max(), compiled


def _gradient_graph(small_shape):
    @tf.function
    def run(small, labels, weights, upstream):
        with tf.GradientTape() as tape:
            tape.watch(small)
            value = resized_cross_entropy(small, labels, weights)
        return [value, tape.gradient(value, small, output_gradients=upstream)]

    return run.get_concrete_function(tf.TensorSpec(small_shape), tf.TensorSpec(FULL, tf.int64),
                                     tf.TensorSpec(FULL), tf.TensorSpec(())).graph


def test_it_keeps_the_small_logits_labels_and_weights_only():
    """Not a tensor of the full-size scores (stock's cross-entropy keeps softmax -
    one-hot): the small logits, the labels (int64) and the weights."""
    graph = _gradient_graph((*SMALL, CLASSES))
    kept = kept_tensors(graph, graph.outputs[0], set())
    pixels = int(np.prod(FULL))
    assert max(k.bytes for k in kept) < 4 * pixels * CLASSES / 2, kept
    assert sum(k.bytes for k in kept) <= (8 + 4) * pixels + 64, kept


def test_the_backward_pass_rebuilds_after_the_forward_and_its_gradient():
    """Gated on the incoming gradient and on the forward's sum: else the rebuild
    runs in the forward pass, or both passes' full-size scores are made at once."""
    graph = _gradient_graph((*SMALL, CLASSES))
    # made in order: the forward's first
    forward, backward = [op for op in graph.get_operations()
                         if op.type == "SparseSoftmaxCrossEntropyWithLogits"]
    assert forward in ancestors(backward)
    resizes = [op for op in graph.get_operations() if op.type == "ResizeBilinear"]
    rebuilt = [op for op in resizes if op in ancestors(backward)]
    assert len(resizes) == 2 and forward in ancestors(rebuilt[-1])
    (upstream,) = [op for op in graph.get_operations()
                   if op.type == "Placeholder" and op.outputs[0].shape.rank == 0]
    assert upstream in ancestors(rebuilt[-1]) and upstream not in ancestors(forward)


def test_logits_resize_is_resize_like():
    x, reference = tf.random.normal((1, 5, 7, 3)), tf.zeros((1, 17, 25, 1))
    twin = LogitsResize.from_config(ResizeLike(True, name="r").get_config())
    assert isinstance(twin, ResizeLike) and twin.align_corners
    np.testing.assert_array_equal(twin([x, reference]), ResizeLike(True)([x, reference]))


def test_16_bit_logits_are_summed_in_float32():
    """`ResizedPixelLoss` casts 16-bit logits (a float16 head's) before the full-size
    sums: in float16 they overflowed to NaN."""
    import keras

    from tfseg.training import losses
    image = keras.Input((33, 49, 3))
    small = keras.layers.Conv2D(CLASSES, 3, strides=4, padding="same", dtype="mixed_float16")(
        image)
    model = keras.Model(image, LogitsResize(dtype="float32")([small, image]))
    rng = np.random.RandomState(0)
    images = tf.constant(rng.uniform(-200, 200, (*FULL, 3)), tf.float32)
    labels = tf.constant(rng.randint(0, CLASSES, FULL))
    resized = losses.for_model(model, resized=True)
    value = resized(labels, resized.logits_of(model, images))
    stock = losses.PixelLoss()(labels, model(images, training=True))
    assert np.isfinite(value) and abs(float(value) - float(stock)) <= 1e-3 * float(stock)
