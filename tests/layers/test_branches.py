import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.layers import Recompute, ResizeLike, SerialBranches
from tests.layers.twins import compare


def branches(norm, prefix):
    """ASPP-like branches on one input: a pooled branch that reads the input's shape
    only through ResizeLike, a 1x1 conv, a dilated depthwise, and the input itself."""
    x = keras.Input((None, None, 6))

    def norm_layer(name):
        return (keras.layers.GroupNormalization(groups=2, name=name) if norm == "group"
                else keras.layers.BatchNormalization(momentum=0.9, name=name))

    pool = keras.layers.GlobalAveragePooling2D(keepdims=True)(x)
    pool = keras.layers.Conv2D(4, 1, name=f"{prefix}_pool_conv")(pool)
    pool = ResizeLike(False)([keras.layers.ReLU()(pool), x])
    conv = norm_layer(f"{prefix}_conv_bn")(keras.layers.Conv2D(4, 1, name=f"{prefix}_conv")(x))
    atrous = keras.layers.DepthwiseConv2D(3, dilation_rate=2, padding="same",
                                          name=f"{prefix}_atrous")(keras.layers.ReLU()(x))
    atrous = norm_layer(f"{prefix}_atrous_bn")(atrous)
    outs = [pool, keras.layers.ReLU()(conv), keras.layers.ReLU()(atrous), x]
    return [keras.Model(x, y, name=f"{prefix}{i}") for i, y in enumerate(outs)]


class Concatenated(keras.layers.Layer):
    """The stock composition: every branch, then one concatenation."""

    def __init__(self, branches, channels=None, **kwargs):
        super().__init__(**kwargs)
        self.branches = branches
        self.channels = channels  # None: those of `branches()`

    def call(self, inputs, training=None):
        return tf.concat([b(inputs, training=training) for b in self.branches], -1)

    def compute_output_shape(self, shape):
        return (*shape[:-1], self.channels or 8 + 2 * shape[-1])


def separable_branches(prefix, recompute):
    """A dilated separable conv (as a memory-saving model's `Recompute` block, or its
    plain layers) and a 1x1 conv on one input: 4 + 4 channels."""
    x, block_input = keras.Input((None, None, 6)), keras.Input((None, None, 6))
    depthwise = keras.layers.DepthwiseConv2D(3, dilation_rate=2, padding="same",
                                             name=f"{prefix}_depthwise")
    norm = keras.layers.BatchNormalization(momentum=0.9, name=f"{prefix}_depthwise_bn")
    pointwise = keras.layers.Conv2D(4, 1, name=f"{prefix}_pointwise")
    if recompute:
        block = keras.Model(block_input, norm(depthwise(block_input)))
        separable = Recompute(block, tail=pointwise, name=f"{prefix}_recompute")(x)
    else:
        separable = pointwise(norm(depthwise(x)))
    conv = keras.layers.Conv2D(4, 1, name=f"{prefix}_conv")(x)
    return [keras.Model(x, separable, name=f"{prefix}0"), keras.Model(x, conv, name=f"{prefix}1")]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("norm", ["batch", "group"])
def test_serial_branches_match_their_concatenation(norm, compiled):
    stock = Concatenated(branches(norm, "a"))
    twin = SerialBranches(branches(norm, "b"), name="serial")
    compare(stock, twin, (2, 11, 9, 6), compiled)


def test_serial_branches_in_float64_are_exact(float64):
    stock = Concatenated(branches("batch", "a"))
    twin = SerialBranches(branches("batch", "b"), name="serial")
    compare(stock, twin, (2, 7, 13, 6), compiled=True, dtype="float64", rtol=1e-10, atol=1e-12)


def test_each_branch_runs_again_only_after_the_previous_branch_gradient():
    """Branch k+1's second run depends on branch k's input gradient: without that
    gate TF's executor runs every branch's backward pass at once."""
    layer = SerialBranches(branches("batch", "c"), name="serial")
    spec = tf.TensorSpec((2, 9, 7, 6))

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(layer(x, training=True) ** 2)
        return loss, tape.gradient(loss, x)

    graph = step.get_concrete_function(spec).graph

    def ancestors(op):
        seen, todo = set(), [op]
        while todo:
            node = todo.pop()
            for parent in [t.op for t in node.inputs] + list(node.control_inputs):
                if parent.name not in seen:
                    seen.add(parent.name)
                    todo.append(parent)
        return seen

    forward = ancestors(graph.outputs[0].op)

    def backward_ops(branch, kind):
        found = [op for op in graph.get_operations() if op.type == kind
                 and op.name not in forward and branch in op.name.split("/")]
        assert found, (branch, kind)
        return found

    # The 1x1 conv branch's input gradient, then the dilated branch's second run.
    first = {op.name for op in backward_ops("c1_1", "Conv2DBackpropInput")}
    for rerun in backward_ops("c2_1", "DepthwiseConv2dNative"):
        assert first & ancestors(rerun), rerun.name


def test_serial_branches_round_trip_through_config():
    inputs = keras.Input((None, None, 6))
    model = keras.Model(inputs, SerialBranches(branches("batch", "d"), name="s")(inputs))
    clone = keras.Model.from_config(model.get_config())
    clone.set_weights(model.get_weights())
    x = np.random.rand(1, 5, 5, 6).astype("float32")
    np.testing.assert_array_equal(clone(x, training=False), model(x, training=False))
    assert model.compute_output_shape((1, 5, 5, 6)) == (1, 5, 5, 20)


def test_serial_branches_refuse_dropout_and_a_single_branch():
    x = keras.Input((None, None, 4))
    with pytest.raises(ValueError, match="dropout"):
        SerialBranches([keras.Model(x, keras.layers.Dropout(0.5)(x)), keras.Model(x, x)])
    with pytest.raises(ValueError, match="two branches"):
        SerialBranches([keras.Model(x, keras.layers.ReLU()(x))])


def test_recompute_blocks_in_a_branch_run_twice_not_three_times(float64):
    """A branch's `Recompute` block runs plainly in the branch's second run: its
    depthwise conv runs in the forward pass and once again, not a third time in the
    block's own backward pass; gradients stay exact."""
    stock = Concatenated(separable_branches("a", recompute=False), channels=8)
    twin = SerialBranches(separable_branches("b", recompute=True), name="serial")
    compare(stock, twin, (2, 7, 13, 6), compiled=True, dtype="float64", rtol=1e-10, atol=1e-12)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(twin(x, training=True) ** 2)
        return tape.gradient(loss, [x] + twin.trainable_weights)

    graph = step.get_concrete_function(tf.TensorSpec((2, 9, 7, 6), tf.float64)).graph
    depthwise = [op for op in graph.get_operations() if op.type == "DepthwiseConv2dNative"]
    assert len(depthwise) == 2, [op.name for op in depthwise]
