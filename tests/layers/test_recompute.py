import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg import memory
from tfseg.layers import Recompute
from tfseg.models import LayerPolicy
from tfseg.models.policy import separable_conv


def unit(channels=8, memory_saving=False):
    x = keras.Input((None, None, channels))
    y = separable_conv(x, channels, LayerPolicy(), "u_sepconv1")
    y = separable_conv(y, channels, LayerPolicy(), "u_sepconv2", rate=2)
    model = keras.Model(x, keras.layers.Add()([x, y]), name="unit")
    return memory.rewrite(model) if memory_saving else model


def run(model, x, compiled):
    def step():
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(model(x, training=True) ** 2)
        return [loss] + tape.gradient(loss, [x] + model.trainable_variables)

    return (tf.function(step) if compiled else step)()


@pytest.mark.parametrize("memory_saving", [False, True])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
def test_recompute_matches_plain_block_and_updates_statistics_once(compiled, memory_saving):
    plain = unit(memory_saving=memory_saving)
    inner = unit(memory_saving=memory_saving)
    inner.set_weights(plain.get_weights())
    inputs = keras.Input((None, None, 8))
    wrapped = keras.Model(inputs, Recompute(inner, name="unit_recompute")(inputs))
    x = tf.constant(np.random.RandomState(0).randn(2, 9, 7, 8).astype("float32"))
    expected, got = run(plain, x, compiled), run(wrapped, x, compiled)
    assert len(got) == len(expected) == 2 + 12  # loss, dx, 2 x (dw, bn, pw, bn)
    scale = max(float(np.abs(a.numpy()).max()) for a in expected)
    for a, b in zip(expected, got):
        # Betas before a pointwise conv + norm have a true gradient of 0: compare to scale.
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-4, atol=1e-7 * scale)
    # One step moved the moving mean once, not twice.
    for a, b in zip(plain.non_trainable_weights, inner.non_trainable_weights):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-6, atol=1e-7)
        assert (a.numpy() != (0 if "mean" in a.path else 1)).any()


def test_recompute_layer_round_trips_through_config():
    inputs = keras.Input((None, None, 8))
    model = keras.Model(inputs, Recompute(unit(), name="r")(inputs))
    clone = keras.Model.from_config(model.get_config())
    clone.set_weights(model.get_weights())
    x = np.random.rand(1, 5, 5, 8).astype("float32")
    np.testing.assert_array_equal(clone(x, training=False), model(x, training=False))


def test_recompute_refuses_blocks_with_dropout():
    x = keras.Input((None, None, 4))
    block = keras.Model(x, keras.layers.Dropout(0.5)(x))
    with pytest.raises(ValueError, match="dropout"):
        Recompute(block, name="r")
