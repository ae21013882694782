"""The one-layer separable conv's twin (`tfseg.layers.fused_separable`): stock's maths
and variables in float64, keeping only its input."""

import keras
import pytest
import tensorflow as tf

from tfseg.layers import ActivationSeparableConv2D
from tfseg.memory.kept import kept_tensors
from tests.layers.twins import activation_first, compare

SHAPE = (2, 13, 11, 4)


def _stock(act, pad, **kwargs):
    """act [-> zero padding] -> SeparableConv2D as one layer (act None: the conv alone)."""
    return activation_first(keras.layers.SeparableConv2D, act, pad, **kwargs)


CASES = [
    ("relu", None, dict(filters=6, kernel_size=3, padding="same")),  # Xception's
    (None, None, dict(filters=5, kernel_size=3, padding="same", use_bias=False)),
    ("swish", ((1, 1), (0, 1)), dict(filters=6, kernel_size=3, strides=2, depth_multiplier=2)),
    ("relu", None, dict(filters=3, kernel_size=3, padding="same", dilation_rate=2,
                        activation="relu")),
]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("act, pad, kwargs", CASES, ids=["relu", "none", "swish_pad", "dilated"])
def test_the_twin_is_the_stock_separable_conv_in_float64(act, pad, kwargs, compiled, float64):
    """Outputs, the input's and every kernel's gradient, to 1e-12; the same variables."""
    compare(_stock(act, pad, **kwargs),
            ActivationSeparableConv2D(input_activation=act, input_padding=pad, **kwargs),
            SHAPE, compiled, dtype="float64", rtol=1e-12, atol=1e-12)


def test_it_keeps_only_its_input_where_stock_keeps_the_activation_and_depthwise_maps():
    kwargs = dict(filters=6, kernel_size=3, padding="same", use_bias=False)

    def kept(layer):
        @tf.function
        def step(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                loss = tf.reduce_sum(layer(x, training=True) ** 2)
            return loss, tape.gradient(loss, [x] + layer.trainable_weights)

        graph = step.get_concrete_function(tf.TensorSpec(SHAPE)).graph
        return sorted(k.bytes for k in kept_tensors(graph, graph.outputs[0], set())
                      if k.bytes > 64)  # maps, not the scalars

    stock, twin = _stock("relu", None, **kwargs), ActivationSeparableConv2D(**kwargs)
    one_map = 4 * 2 * 13 * 11 * 4
    # Stock: relu(x) and the depthwise output (and the output, which the square's gradient
    # reads); the twin: the output alone, x being the step's input.
    assert kept(stock) == sorted([one_map, one_map, 4 * 2 * 13 * 11 * 6])
    assert kept(twin) == [4 * 2 * 13 * 11 * 6]


def test_it_round_trips_its_config_and_refuses_parts():
    twin = ActivationSeparableConv2D(6, 3, input_activation="swish", input_padding=((1, 0), (0, 1)))
    again = ActivationSeparableConv2D.from_config(twin.get_config())
    assert (again.input_activation, again.input_padding) == ("swish", ((1, 0), (0, 1)))
    with pytest.raises(ValueError, match="takes one input"):
        ActivationSeparableConv2D(6, 3, input_parts=[2, 2])
