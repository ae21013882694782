"""Runs a memory-saving layer and its stock twin on the same weights and data."""

import keras
import numpy as np
import tensorflow as tf


class ReluThenDepthwise(keras.layers.DepthwiseConv2D):
    """The stock composition ReLU -> DepthwiseConv2D, as one layer for comparison."""

    def call(self, inputs):
        return super().call(tf.nn.relu(inputs))


def activation_first(stock_class, act, pad, **kwargs):
    """A `stock_class` layer that runs the stock activation `act` (None: none) [and the
    zero padding `pad`, ((top, bottom), (left, right))] on its input first: the stock
    composition a twin taking them in replaces, as one layer for comparison."""
    stock_act = keras.activations.get(act) if act else (lambda t: t)

    class Stock(stock_class):
        def call(self, inputs):
            t = stock_act(inputs)
            return super().call(t if pad is None else tf.pad(t, [[0, 0], *pad, [0, 0]]))

        def compute_output_shape(self, shape):
            if pad is not None:
                shape = (shape[0], shape[1] + sum(pad[0]), shape[2] + sum(pad[1]), shape[3])
            return super().compute_output_shape(shape)

    return Stock(**kwargs)


def train_step(layer, x, upstream, compiled):
    def step():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
        return [y] + tape.gradient(loss, [x] + layer.trainable_weights)

    return (tf.function(step) if compiled else step)()


def compare(stock, twin, shape, compiled, seed=0, dtype="float32", rtol=1e-4, atol=1e-5,
            perturb=0.5):
    """Asserts outputs, input/variable gradients and moving statistics agree."""
    rng = np.random.RandomState(seed)
    x = tf.constant(rng.randn(*shape).astype("float32") * 2 + 0.5, dtype=dtype)
    stock.build(x.shape)
    twin.build(x.shape)
    assert [w.path.split("/")[-1] for w in stock.weights] == [
        w.path.split("/")[-1] for w in twin.weights
    ]
    for w in stock.trainable_weights:  # away from the initial 1s and 0s
        w.assign(w.numpy() + rng.randn(*w.shape).astype("float32") * perturb)
    twin.set_weights(stock.get_weights())
    upstream = tf.constant(rng.randn(*stock.compute_output_shape(shape)).astype("float32"))
    got_stock = train_step(stock, x, upstream, compiled)
    got_twin = train_step(twin, x, upstream, compiled)
    names = ["output", "input gradient"] + [w.path for w in stock.trainable_weights]
    for name, a, b in zip(names, got_stock, got_twin):
        a, b = np.asarray(a, "float32"), np.asarray(b, "float32")
        assert np.isfinite(b).all(), name
        tol = atol if name == "output" else atol * max(1.0, np.abs(a).max())
        np.testing.assert_allclose(b, a, rtol=rtol, atol=tol, err_msg=name)
    for a, b in zip(stock.non_trainable_weights, twin.non_trainable_weights):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-6, atol=1e-7, err_msg=a.path)
    return got_stock, got_twin


def training_ops(layer, shape, dtype=tf.float32):
    """The ops of `layer`'s traced training step: its forward pass and the gradients of
    its input and weights."""
    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
        return tape.gradient(y, [x] + layer.trainable_weights)

    return step.get_concrete_function(tf.TensorSpec(shape, dtype)).graph.get_operations()


def ancestors(op, control=True):
    """The ops `op` waits for: through its inputs and (with `control`) control inputs."""
    seen, todo = set(), [op]
    while todo:
        op = todo.pop()
        if op not in seen:
            seen.add(op)
            todo.extend([t.op for t in op.inputs] + (list(op.control_inputs) if control else []))
    return seen
