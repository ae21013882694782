"""The rewritten model takes its inputs in stock's structure (one tensor, a list, a
dict), and so does each model nested in it that the rewrite rebuilds: a call as stock's
matches it, without Keras' warning that the structure of the inputs does not."""

import warnings

import keras
import numpy as np
import pytest

from tfseg import keras_graph, memory
from tests.memory.test_nested import backbone, task
from tests.memory.test_traced import Inverted


def conv_bn_relu(x, name):
    x = keras.layers.Conv2D(4, 3, padding="same", use_bias=False, name=f"{name}_conv")(x)
    return keras.layers.ReLU(name=f"{name}_relu")(
        keras.layers.BatchNormalization(name=f"{name}_bn")(x))


def single():
    inputs = keras.Input((8, 8, 3))
    return keras.Model(inputs, conv_bn_relu(inputs, "a"), name="single")


def listed():
    a, b = keras.Input((8, 8, 3), name="a"), keras.Input((8, 8, 3), name="b")
    return keras.Model([a, b], conv_bn_relu(keras.layers.Add()([a, b]), "c"), name="listed")


def keyed():
    a, b = keras.Input((8, 8, 3), name="a"), keras.Input((8, 8, 3), name="b")
    return keras.Model({"b": b, "a": a}, conv_bn_relu(keras.layers.Subtract()([a, b]), "c"),
                       name="keyed")


def sequential():
    return keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3, use_bias=False),
                             keras.layers.BatchNormalization(), keras.layers.ReLU()])


def traced_block():
    inputs = keras.Input((8, 8, 6))
    return keras.Model(inputs, Inverted(name="block0")(inputs), name="traced")


def nested_sequential():
    inputs = keras.Input((8, 8, 3))
    stem = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 1, use_bias=False),
                             keras.layers.BatchNormalization()], name="stem")
    return keras.Model(inputs, keras.layers.ReLU()(stem(inputs)), name="outer")


def mobilenet():
    return keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3), alpha=0.35)


def shapes(structure):
    """A structure's tensors as (name, shape): a list of one is not one tensor."""
    return keras.tree.map_structure(lambda t: (t.name, tuple(t.shape)), structure)


def data(structure):
    return keras.tree.map_structure(
        lambda t: np.random.RandomState(0).uniform(size=(1, *t.shape[1:])).astype("float32"),
        structure)


def structure_warnings(model, inputs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model(inputs)
    return [str(w.message) for w in caught if "structure" in str(w.message)]


@pytest.mark.parametrize("make", [single, listed, keyed, sequential, traced_block,
                                  nested_sequential, mobilenet])
def test_the_rewritten_model_takes_stocks_input_structure_without_a_warning(make):
    stock = make()
    lean = memory.rewrite(stock)
    assert shapes(lean.input) == shapes(keras_graph.input_structure(stock))
    inputs = data(keras_graph.input_structure(stock))
    assert structure_warnings(lean, inputs) == []
    np.testing.assert_allclose(lean(inputs), stock(inputs), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cut", [False, True])
def test_a_nested_model_the_rewrite_rebuilds_keeps_its_input_structure(cut):
    """A backbone called on one tensor, rewritten whole or without its last upsampling
    (`UpsampledConv2D` in the task model takes it in)."""
    stock = task(backbone(), kernel=1 if cut else 3)
    lean = memory.rewrite(stock)
    inner = lean.get_layer("backbone")
    assert (len(inner.layers) < len(stock.get_layer("backbone").layers)) == cut
    assert shapes(inner.input) == shapes(stock.get_layer("backbone").input)
    assert structure_warnings(lean, data(stock.input)) == []
    assert structure_warnings(inner, data(inner.input)) == []
