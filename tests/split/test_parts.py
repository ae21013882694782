"""Natural parts of a functional model: consecutive, one tensor crossing each cut
besides skip connections, each with weights."""

import keras
import pytest

from tests.conftest import TINY
from tfseg.memory.graph import Graph
from tfseg.models import deeplab_v3_plus
from tfseg.split import parts
from tfseg.split.parts import SKIP_FRACTION


@pytest.mark.parametrize("memory_saving", [False, True])
@pytest.mark.parametrize("output_stride", [8, 16])
def test_every_layer_is_in_one_part_in_order(output_stride, memory_saving):
    model = deeplab_v3_plus(5, output_stride=output_stride, memory_saving=memory_saving, **TINY)
    found = parts(model)
    names = [name for part in found for name in part.layers]
    graph_order = [node.operation.name for node in Graph(model).nodes]
    assert names == graph_order  # every layer once, in topological order
    assert all(part.weight_bytes > 0 for part in found)
    assert sum(p.weight_bytes for p in found) == sum(w.numpy().nbytes for w in model.weights)
    assert sum(p.trainable_bytes for p in found) == sum(
        w.numpy().nbytes for w in model.trainable_weights)
    assert found[-1].name == "logits_resize"
    # The ASPP's parallel branches are never cut apart: one part holds them all.
    branches = {"aspp_pool_conv", "aspp_conv1x1"} | (
        {"aspp_branches"} if memory_saving else {"aspp_sepconv1_pointwise"})
    assert len({k for k, p in enumerate(found) for n in p.layers if n in branches}) == 1


def test_cuts_cross_one_tensor_besides_skips():
    model = deeplab_v3_plus(5, memory_saving=True, **TINY)
    found = parts(model)
    graph = Graph(model)
    part_of = {name: k for k, part in enumerate(found) for name in part.layers}
    reach = len(graph.nodes) // SKIP_FRACTION
    position = {node.operation.name: i for i, node in enumerate(graph.nodes)}
    last_read = {}
    for node in graph.nodes:
        for tensor in node.input_tensors:
            last_read[id(tensor)] = position[node.operation.name]
    for cut in range(len(found) - 1):
        crossing = set()
        for node in graph.nodes:
            if part_of[node.operation.name] > cut:
                for tensor in node.input_tensors:
                    made = tensor._keras_history.operation.name
                    if made in part_of and part_of[made] <= cut and (
                            last_read[id(tensor)] - position[made] <= reach):  # not a skip
                        crossing.add(id(tensor))
        assert len(crossing) <= 1, found[cut].name
    # The stride-4 feature crosses from entry block 2 to the decoder (whose first
    # separable conv takes in the concatenation): a skip.
    low = part_of["entry_block2_sepconv2_pointwise_bn"]
    assert part_of["decoder_conv1_depthwise_recompute"] - low > 10


def test_weightless_layers_join_a_neighbour():
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.ReLU(name="first_relu")(inputs)
    x = keras.layers.Conv2D(4, 3, name="conv_a")(x)
    x = keras.layers.ReLU(name="relu_a")(x)
    x = keras.layers.Conv2D(4, 3, name="conv_b")(x)
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    found = parts(keras.Model(inputs, x))
    assert [p.layers for p in found] == [("first_relu", "conv_a"),
                                         ("relu_a", "conv_b", "pool")]
    assert [p.name for p in found] == ["conv_a", "pool"]
