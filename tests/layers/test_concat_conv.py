"""`ResizedConcatConv2D` against stock `Resizing`s, a `Concatenate` and a 1x1 `Conv2D`."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.layers import ResizedConcatConv2D
from tests.layers.test_upsampled_conv import step
from tests.memory.test_patterns import kept_bytes

# Parts at odd sizes: one taken as it is, two resized up to 13x17 and one down.
SHAPES = [(13, 17, 4), (7, 9, 6), (4, 5, 3), (26, 34, 2)]


def models(interpolation, use_bias=True, activation=None, shapes=SHAPES):
    inputs = [keras.Input(s) for s in shapes]
    height, width = shapes[0][:2]
    parts = [inputs[0]] + [keras.layers.Resizing(height, width, interpolation=interpolation)(x)
                           for x in inputs[1:]]
    conv = dict(use_bias=use_bias, activation=activation, name="fuse")
    stock = keras.Model(inputs, keras.layers.Conv2D(5, 1, **conv)(
        keras.layers.Concatenate()(parts)))
    sizes = [None] + [[height, width, interpolation]] * (len(shapes) - 1)
    twin = keras.Model(inputs, ResizedConcatConv2D(5, 1, input_sizes=sizes, **conv)(inputs))
    for w in stock.weights:  # a bias away from zero, so that its place is checked
        w.assign(np.random.RandomState(len(w.path)).uniform(-1, 1, w.shape))
    twin.set_weights(stock.get_weights())
    return stock, twin


def inputs(dtype="float64", batch=2, shapes=SHAPES):
    rng = np.random.RandomState(0)
    return [tf.constant(rng.randn(batch, *s).astype(dtype)) for s in shapes]


@pytest.mark.parametrize("interpolation, use_bias, activation", [
    ("bilinear", True, None), ("bilinear", False, "relu"), ("nearest", True, "tanh")])
def test_outputs_and_gradients_equal_stock_in_float64(float64, interpolation, use_bias,
                                                      activation):
    """TF's bilinear resize computes in float32 whatever the dtype: there the two
    orders agree to float32's precision; nearest is a copy, so float64's."""
    stock, twin = models(interpolation, use_bias, activation)
    assert [w.path for w in twin.weights] == [w.path for w in stock.weights]
    x = inputs()

    def run(model):  # `step` (one input) on the list, the inputs' gradients by position
        out, grads = step(keras.Model(model.inputs, model.outputs), x)
        return out, grads

    (expected, grads), (got, twin_grads) = run(stock), run(twin)
    tol = 1e-6 if interpolation == "bilinear" else 1e-12
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=tol, atol=tol)
    assert grads.keys() == twin_grads.keys()
    for path, g in grads.items():
        for a, b in zip(tf.nest.flatten(twin_grads[path]), tf.nest.flatten(g)):
            scale = float(np.abs(b.numpy()).max())
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=tol, atol=tol * scale,
                                       err_msg=path)


def test_it_keeps_the_parts_not_the_concatenation():
    shapes = [(33, 33, 16), (17, 17, 16), (9, 9, 16)]
    stock, twin = models("bilinear", shapes=shapes)
    x = inputs("float32", 2, shapes)
    concatenation = 2 * 33 * 33 * 48 * 4
    assert kept_bytes(stock, x) - kept_bytes(twin, x) >= concatenation // 2


def test_it_refuses_what_does_not_commute():
    with pytest.raises(ValueError, match="1x1"):
        ResizedConcatConv2D(3, 3, input_sizes=[None])
    with pytest.raises(ValueError, match="bicubic"):
        ResizedConcatConv2D(3, 1, input_sizes=[[4, 4, "bicubic"]])


def test_it_saves_and_loads(tmp_path):
    _, twin = models("bilinear")
    path = str(tmp_path / "twin.keras")
    twin.save(path)
    loaded = keras.models.load_model(path)
    x = inputs("float32")
    np.testing.assert_allclose(loaded(x).numpy(), twin(x).numpy(), rtol=1e-6)
