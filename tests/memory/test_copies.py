"""Copies that share a layer's variables (`tfseg.memory.copies`)."""

import keras
import numpy as np

from tfseg.memory.copies import shared_copy


class Stack(keras.layers.Layer):
    """Blocks in a list, as keras-hub's encoders hold them."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.blocks = [keras.layers.Dense(4, name=f"dense{i}") for i in range(2)]
        self.norm = keras.layers.LayerNormalization(name="norm")

    def call(self, x):
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


def test_a_shared_copy_copies_the_targets_and_their_path_and_shares_all_else():
    stack = Stack(name="stack")
    x = np.random.RandomState(0).rand(2, 3).astype("float32")
    expected = stack(x).numpy()
    copy = shared_copy(stack, {id(stack.blocks[1])})
    assert copy is not stack and copy.blocks[0] is stack.blocks[0]
    assert copy.blocks[1] is not stack.blocks[1] and copy.norm is stack.norm
    assert copy.blocks[1].kernel is stack.blocks[1].kernel
    assert [id(w) for w in copy.weights] == [id(w) for w in stack.weights]
    copy.blocks[1].activation = keras.activations.relu  # a setting of the copy alone
    assert stack.blocks[1].activation is keras.activations.linear
    np.testing.assert_allclose(stack(x), expected)
    inputs = keras.Input((3,))
    keras.Model(inputs, copy(inputs))
    assert copy._inbound_nodes and not stack._inbound_nodes  # its own graph nodes
    assert shared_copy(stack, set()) is stack


def test_a_sublayer_held_twice_is_copied_once():
    """keras-hub's SAM MLP tracks its Dense layers itself and in the Sequential it calls:
    both must reach the one copy (a second copy would keep the stock class)."""
    inner = [keras.layers.Dense(4), keras.layers.Dense(2)]
    block = Stack(name="held")
    block.blocks = inner
    block.net = keras.Sequential(inner)
    copy = shared_copy(block, {id(inner[1])})
    assert copy.blocks[1] is copy.net.layers[1] is not inner[1]
    assert copy.blocks[0] is copy.net.layers[0] is inner[0]
