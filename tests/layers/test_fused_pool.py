"""The pooling twins (`tfseg.layers.fused_pool`), and the conv and pooling twins called on
the parts of a concatenation (`input_parts`, `tfseg.layers.keep_input`)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.layers import (ActivationAveragePooling2D, ActivationDepthwiseConv2D,
                          ActivationMaxPooling2D, ReluConv2D)
from tfseg.memory.kept import kept_tensors
from tests.layers.twins import activation_first, ancestors, compare

PARTS = (3, 5, 2)  # channels of each part; odd sizes below
SHAPE = (2, 13, 11)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("act, pad, kwargs", [
    ("relu", ((1, 1), (1, 1)), dict(pool_size=3, strides=2)),  # ResNet's stem
    ("swish", None, dict(pool_size=2, padding="same"))])
def test_activation_max_pool_matches_stock(act, pad, kwargs, compiled, float64):
    """relu -> zero padding -> 3x3 max pool (ResNet's stem) as one twin keeping its
    input: the output and the input gradient, exact, with ties (many zeros after
    the ReLU) going where TF's own MaxPoolGrad sends them."""
    compare(activation_first(keras.layers.MaxPooling2D, act, pad, **kwargs),
            ActivationMaxPooling2D(input_activation=act, input_padding=pad, **kwargs),
            (2, 13, 11, 4), compiled, dtype="float64", rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("act, kwargs", [
    ("relu", dict(pool_size=3, strides=1, padding="same")),  # Inception's pooling branch
    ("swish", dict(pool_size=2, strides=2, padding="valid"))])
def test_activation_average_pool_matches_stock(act, kwargs, compiled, float64):
    stock_act = keras.activations.get(act)

    class Stock(keras.layers.AveragePooling2D):
        def call(self, inputs):
            return super().call(stock_act(inputs))

    compare(Stock(**kwargs), ActivationAveragePooling2D(input_activation=act, **kwargs),
            (2, 13, 11, 4), compiled, dtype="float64", rtol=1e-12, atol=1e-12)


def _on_parts(kind):
    """(stock layer reading relu(concat(parts)), its twin reading the parts)."""
    if kind == "conv1x1":
        args = (4, 1), dict(use_bias=True)
    elif kind == "conv3x3":
        args = (4, 3), dict(strides=2, padding="valid")
    else:
        args = (3,), dict(strides=2 if kind == "max_pool" else 1,
                          padding="valid" if kind == "max_pool" else "same")
    stock_class, twin_class = {
        "conv1x1": (keras.layers.Conv2D, ReluConv2D), "conv3x3": (keras.layers.Conv2D, ReluConv2D),
        "max_pool": (keras.layers.MaxPooling2D, ActivationMaxPooling2D),
        "avg_pool": (keras.layers.AveragePooling2D, ActivationAveragePooling2D)}[kind]
    return (stock_class(*args[0], **args[1]),
            twin_class(*args[0], input_activation="relu", input_parts=PARTS, **args[1]))


def _step(layer, parts, upstream, joined):
    with tf.GradientTape() as tape:
        tape.watch(parts)
        x = tf.nn.relu(tf.concat(parts, -1)) if joined else parts
        loss = tf.reduce_sum(layer(x, training=True) * upstream)
    return [loss] + tape.gradient(loss, parts + layer.trainable_weights)


@pytest.mark.parametrize("compiled", [False, True, "xla"], ids=["eager", "tf_function", "xla"])
@pytest.mark.parametrize("kind", ["conv1x1", "conv3x3", "max_pool", "avg_pool"])
def test_twins_on_parts_match_relu_of_the_concatenation(kind, compiled, float64):
    """A twin called on the parts equals stock ReLU(Concatenate(parts)) -> layer in
    float64, also under XLA (whose gates are data dependencies): the output, each
    part's gradient and the weights' gradients."""
    rng = np.random.RandomState(0)
    parts = [tf.constant(rng.randn(*SHAPE, c)) for c in PARTS]
    stock, twin = _on_parts(kind)
    stock.build((*SHAPE, sum(PARTS)))
    twin.build([p.shape for p in parts])
    assert [w.path for w in twin.weights] == [w.path.replace(stock.name, twin.name)
                                              for w in stock.weights]
    for w in stock.weights:
        w.assign(rng.randn(*w.shape))
    twin.set_weights(stock.get_weights())
    out = stock.compute_output_shape((*SHAPE, sum(PARTS)))
    assert twin.compute_output_shape([p.shape for p in parts]) == out
    upstream = tf.constant(rng.randn(*out))
    run = tf.function(_step, jit_compile=compiled == "xla") if compiled else _step
    want, got = run(stock, parts, upstream, True), run(twin, parts, upstream, False)
    assert len(want) == len(got) == 1 + len(PARTS) + len(stock.trainable_weights)
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["conv3x3", "max_pool", "avg_pool"])
def test_parts_are_kept_and_their_concatenation_is_made_after_dy(kind):
    """The traced step keeps the parts, not their concatenation or its ReLU (stock keeps
    the ReLU's output); the backward pass's concatenation waits for the output
    gradient, so TF cannot make it, and keep it, in the forward pass."""
    stock, twin = _on_parts(kind)
    shapes = [(*SHAPE, c) for c in PARTS]
    joined = (*SHAPE, sum(PARTS))

    def kept(layer, joined_input):
        @tf.function
        def step(*parts):
            return _step(layer, list(parts), 1.0, joined_input)

        graph = step.get_concrete_function(*[tf.TensorSpec(s) for s in shapes]).graph
        found = kept_tensors(graph, graph.outputs[0], set())
        return graph, [tuple(graph.get_tensor_by_name(k.tensor).shape) for k in found]

    _, stock_kept = kept(stock, True)
    assert joined in stock_kept
    graph, twin_kept = kept(twin, False)
    assert joined not in twin_kept
    concats = [op for op in graph.get_operations()
               if op.type == "ConcatV2" and tuple(op.outputs[0].shape) == joined]
    waiting = [op for op in concats if any(a.type == "Identity" and a.control_inputs
                                           for a in ancestors(op))]
    assert len(concats) == 2 and len(waiting) == 1  # the forward pass's, the backward's


def test_parts_round_trip_through_config_and_are_refused_where_they_do_not_apply():
    layer = ActivationAveragePooling2D(3, strides=1, padding="same", input_parts=[4, 6])
    clone = ActivationAveragePooling2D.from_config(layer.get_config())
    assert clone.input_parts == [4, 6] and clone.input_activation == "relu"
    assert clone.compute_output_shape([(1, 9, 9, 4), (1, 9, 9, 6)]) == (1, 9, 9, 10)
    with pytest.raises(ValueError, match=r"called on parts of \[4, 5\] channels; its "
                                         r"input_parts are \[4, 6\]"):
        layer([tf.ones([1, 9, 9, 4]), tf.ones([1, 9, 9, 5])])
    with pytest.raises(ValueError, match="takes one input"):
        ActivationDepthwiseConv2D(3, input_parts=[2, 2])
    with pytest.raises(ValueError, match="padded zeros count"):
        ActivationAveragePooling2D(3, input_padding=((1, 1), (1, 1)))
