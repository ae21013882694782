"""tfseg.keras_graph: each read of Keras's private attributes, on a small functional, a
nested and a Sequential model; a Keras release that renames one fails here by name."""

import keras
import numpy as np

from tfseg import keras_graph as kg


class Block(keras.layers.Layer):
    """A subclassed layer holding two sublayers, one of them twice."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.conv = keras.layers.Conv2D(4, 1, name="inner_conv")
        self.relu = keras.layers.ReLU(name="inner_relu")
        self.again = self.conv

    def call(self, x):
        return self.relu(self.conv(x))


def nested():
    """image -> conv -> inner model (norm -> relu) -> block, called twice on one tensor."""
    inputs = keras.Input((9, 7, 3), name="image")
    x = keras.layers.Conv2D(4, 3, padding="same", name="conv")(inputs)
    inner_in = keras.Input((9, 7, 4))
    inner = keras.Model(inner_in, keras.layers.ReLU(name="relu")(
        keras.layers.BatchNormalization(name="bn")(inner_in)), name="inner")
    block = Block(name="block")
    y = inner(x)
    return keras.Model({"image": inputs}, [block(y), block(x)], name="outer"), inner, block


def test_nodes_in_order_and_producers_on_a_nested_model():
    model, inner, block = nested()
    names = [node.operation.name for node in kg.nodes_in_order(model)]
    assert names.index("conv") < names.index("inner") < names.index("block")
    assert names.count("block") == 2  # one node per call
    assert [n.operation.name for n in kg.nodes_in_order(model, inputs=True)][0] == "image"
    assert sum(len(nodes) for nodes in kg.nodes_by_depth(model).values()) == len(names) + 1
    first, second = model.outputs
    assert kg.producer(first) is block and kg.producer(second) is block
    assert kg.history(first)[1:] == (0, 0) and kg.history(second)[1] == 1
    assert kg.producing_node(second) is kg.call_nodes(block)[1]
    assert [n.operation.name for n in kg.nodes_in_order(inner)] == ["bn", "relu"]
    assert kg.input_structure(model).keys() == {"image"}
    assert isinstance(kg.output_structure(model), list) and len(kg.output_structure(model)) == 2


def test_sublayers_of_a_subclassed_layer_and_a_model():
    model, inner, block = nested()
    assert [layer.name for layer in kg.sublayers(block)] == ["inner_conv", "inner_relu"]
    assert kg.sublayers(block, include_self=True)[0] is block
    assert [layer.name for layer in kg.direct_sublayers(block)] == ["inner_conv", "inner_relu"]
    everything = {layer.name for layer in kg.sublayers(model)}
    assert {"conv", "inner", "bn", "relu", "block", "inner_conv"} <= everything
    assert "bn" not in {layer.name for layer in kg.sublayers(model, recursive=False)}


def test_a_copy_made_to_track_other_sublayers_tracks_only_those():
    _, _, block = nested()
    copy = Block(name="copy")
    kg.set_direct_sublayers(copy, [block.conv])
    assert kg.direct_sublayers(copy) == [block.conv]
    assert kg.sublayers(copy) == [block.conv]


def test_a_sequential_model_reads_as_a_functional_one():
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3, name="d0"),
                              keras.layers.ReLU(name="r0"), keras.layers.Dense(2, name="d1")])
    assert [n.operation.name for n in kg.nodes_in_order(model)] == ["d0", "r0", "d1"]
    assert kg.producer(model.outputs[0]).name == "d1"
    assert len(kg.call_nodes(model.get_layer("r0"))) == 1
    assert kg.sequential_graph(model).layers[1:] == model.layers
    assert kg.sequential_graph(keras.Sequential([keras.layers.Dense(2)])) is None  # not built


def test_parent_path_and_variable_value():
    layer = keras.layers.Dense(2, name="dense")
    kg.set_parent_path(layer, "outer/block")
    layer.build((None, 3))
    assert kg.parent_path(layer) == "outer/block"
    assert layer.kernel.path == "outer/block/dense/kernel"
    before = kg.variable_value(layer.bias)
    kg.set_variable_value(layer.bias, keras.ops.ones((2,)))
    np.testing.assert_array_equal(layer.bias.numpy(), [1, 1])
    kg.set_variable_value(layer.bias, before)
    np.testing.assert_array_equal(layer.bias.numpy(), [0, 0])


def test_slot_index_and_remake_variable():
    dense = keras.layers.Dense(2, name="dense")
    dense.build((None, 3))
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    optimizer.build([dense.kernel, dense.bias])
    assert kg.slot_index(optimizer, dense.bias) == 1
    assert optimizer.momentums[kg.slot_index(optimizer, dense.kernel)].shape == (3, 2)
    kg.remake_variable(dense.bias, np.array([2.0, 3.0], "float32"))
    np.testing.assert_array_equal(dense.bias.numpy(), [2, 3])
