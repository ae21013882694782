"""`Recompute(chunks=k)` (tfseg/layers/chunked.py): a separable conv's backward pass a
k-th of its channels at a time gives stock's gradients, one chunk after the other; and
DeepLab's decoder runs so, exactly, wherever its norms work on each channel alone."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.layers import Recompute
from tfseg.layers.chunked import ranges
from tfseg.models import deeplab_v3_plus
from tests.conftest import TINY
from tests.layers.test_recompute import Composition, separable
from tests.layers.twins import ancestors, compare, training_ops


def test_ranges_split_channels_into_near_equal_parts_none_empty():
    assert ranges(6, 4) == [(0, 2), (2, 3), (3, 4), (4, 6)]
    assert ranges(304, 4) == [(0, 76), (76, 152), (152, 228), (228, 304)]
    assert ranges(3, 8) == [(0, 1), (1, 2), (2, 3)]  # no more chunks than channels
    assert ranges(5, 1) == [(0, 5)]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("chunks", [2, 4])
@pytest.mark.parametrize("rate,strides,relu_inside,bias", [
    (1, 1, False, False), (1, 2, False, True), (3, 1, True, True)],
    ids=["plain", "stride2_bias", "dilated_relu_inside"])
def test_a_chunked_separable_conv_matches_stock(rate, strides, relu_inside, bias, chunks,
                                                compiled):
    stock = Composition(*separable("batch", rate, strides, relu_inside, bias, "a"))
    block, tail = separable("batch", rate, strides, relu_inside, bias, "b")
    compare(stock, Recompute(block, tail=tail, chunks=chunks, name="b_recompute"),
            (2, 11, 9, 6), compiled)


def test_a_chunked_separable_conv_matches_stock_under_xla():
    stock = Composition(*separable("batch", 1, 1, True, True, "a"))
    block, tail = separable("batch", 1, 1, True, True, "b")
    twin = Recompute(block, tail=tail, chunks=3, name="b_recompute")
    x = tf.constant(np.random.RandomState(0).randn(2, 11, 9, 6).astype("float32"))
    for layer in (stock, twin):
        layer.build(x.shape)
    twin.set_weights(stock.get_weights())

    def step(layer):
        @tf.function(jit_compile=True)
        def run(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                loss = tf.reduce_sum(layer(x, training=True) ** 2)
            return tape.gradient(loss, [x] + layer.trainable_weights)
        return run(x)

    for a, b in zip(step(stock), step(twin)):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-4, atol=1e-4)


def test_each_chunk_runs_again_only_after_the_one_before_is_done():
    """Chunk c + 1's second run waits for chunk c's tail filter gradient: run side by
    side, the chunks' maps would all be alive at once and save nothing."""
    block, tail = separable("batch", 1, 1, True, False, "b")
    layer = Recompute(block, tail=tail, chunks=3, name="b_recompute")
    layer.build((2, 11, 9, 6))
    ops = training_ops(layer, (2, 11, 9, 6))
    filters = [op for op in ops if op.type == "Conv2DBackpropFilter"]
    again = [op for op in ops if op.type == "DepthwiseConv2dNative"][1:]  # after the forward
    assert len(filters) == len(again) == 3  # one of each per chunk
    for done, later in zip(filters, again[1:]):
        assert done in ancestors(later)


def test_a_block_that_mixes_channels_is_refused_naming_the_layer():
    block, tail = separable("group", 1, 1, False, False, "g")
    with pytest.raises(ValueError, match="g_bn .GroupNormalization. mixes channels"):
        Recompute(block, tail=tail, chunks=2, name="g_recompute")
    block, _ = separable("batch", 1, 1, False, False, "d")
    with pytest.raises(ValueError, match="chunks needs a linear Conv2D tail"):
        Recompute(block, chunks=2, name="d_recompute")


def test_chunks_round_trip_through_config():
    block, tail = separable("batch", 1, 1, True, False, "b")
    layer = Recompute(block, tail=tail, chunks=3, name="b_recompute")
    assert Recompute.from_config(layer.get_config()).chunks == 3


def _head_recomputes(model):
    return [layer for layer in model._flatten_layers()
            if isinstance(layer, Recompute) and type(layer.tail) is keras.layers.Conv2D
            and layer.name.startswith(("aspp", "decoder"))]


@pytest.mark.slow  # 10-23 s: more than its share of the fast tier's 12 minutes
@pytest.mark.parametrize("output_stride", [8, pytest.param(16, marks=pytest.mark.full)])
def test_deeplab_chunks_its_heads_separable_convs_exactly(output_stride, float64):
    """Memory saving chunks the decoder's two separable convs (ASPP's three stay whole);
    their gradients are the unchunked ones to float64 rounding (the whole network's)."""
    keras.utils.set_random_seed(1)
    model = deeplab_v3_plus(3, output_stride=output_stride, memory_saving=True, dropout=0.0,
                            input_shape=(65, 97, 3), **TINY)
    head = _head_recomputes(model)
    assert {layer.name: layer.chunks for layer in head} == {
        "aspp_sepconv1_depthwise_recompute": 1, "aspp_sepconv2_depthwise_recompute": 1,
        "aspp_sepconv3_depthwise_recompute": 1, "decoder_conv1_depthwise_recompute": 4,
        "decoder_conv2_depthwise_recompute": 4}
    for layer in head:  # ASPP's too, for the exactness of its (XLA-free) dilated path
        layer.chunks = 4
    x = tf.constant(np.random.RandomState(0).uniform(-1, 1, (2, 65, 97, 3)))

    def grads():
        @tf.function
        def step(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(model(x, training=True) ** 2)
            return tape.gradient(loss, model.trainable_variables)
        return [g.numpy() for g in step(x)]

    chunked = grads()
    for layer in head:
        layer.chunks = 1  # read when the step is traced
    whole = grads()
    scale = max(np.abs(g).max() for g in whole)
    assert max(np.abs(a - b).max() for a, b in zip(chunked, whole)) < 1e-12 * scale


def test_deeplab_with_group_norm_chunks_nothing():
    model = deeplab_v3_plus(3, norm="group", memory_saving=True, input_shape=(65, 97, 3),
                            **TINY)
    head = _head_recomputes(model)
    assert head and {layer.chunks for layer in head} == {1}


def _reference_block(name):
    """[high, low] -> resize high to low's size (low read for its size only) ->
    depthwise -> norm; low gets no gradient."""
    from tfseg.layers import ResizeLike
    high, low = keras.Input((None, None, 4)), keras.Input((None, None, 2))
    y = ResizeLike(name=f"{name}_up")([high, low])
    y = keras.layers.DepthwiseConv2D(3, padding="same", name=f"{name}_dw")(y)
    return keras.Model([high, low], keras.layers.BatchNormalization(name=f"{name}_bn")(y))


def test_an_unknown_batch_and_an_input_read_for_its_size_only():
    """Keras' fit traces an unknown batch after a smaller last batch: the zeros of an
    input with no gradient were made from its static shape (a ValueError)."""
    block = _reference_block("r")
    layer = Recompute(block, tail=keras.layers.Conv2D(3, 1, name="r_pw"), chunks=3, name="r")
    whole = Recompute(_reference_block("w"), tail=keras.layers.Conv2D(3, 1, name="w_pw"),
                      name="w")
    rng = np.random.RandomState(0)
    high = tf.constant(rng.randn(2, 3, 4, 4).astype("float32"))
    low = tf.constant(rng.randn(2, 11, 13, 2).astype("float32"))
    results = []
    for each in (whole, layer):
        each([high, low])
    layer.set_weights(whole.get_weights())
    for each in (whole, layer):
        @tf.function(input_signature=[tf.TensorSpec((None, 3, 4, 4)),
                                      tf.TensorSpec((None, 11, 13, 2))])
        def step(high, low):
            with tf.GradientTape() as tape:
                tape.watch([high, low])
                loss = tf.reduce_sum(each([high, low], training=True) ** 2)
            return tape.gradient(loss, [high, low])
        results.append(step(high, low))
    for a, b in zip(*results):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-4, atol=1e-5)
    assert not results[1][1].numpy().any()  # read for its size only


def test_a_block_that_reads_a_map_twice_or_a_bad_chunk_count_is_refused():
    x = keras.Input((None, None, 4))
    twice = keras.Model(x, keras.layers.Concatenate()([keras.layers.ReLU()(x), x]))
    with pytest.raises(ValueError, match="read by two of its layers"):
        Recompute(twice, tail=keras.layers.Conv2D(2, 1), chunks=2, name="t")
    block, tail = separable("batch", 1, 1, True, False, "k")
    for bad in (0, 2.5, "3", True):
        with pytest.raises(ValueError, match="chunks must be an integer >= 1"):
            Recompute(block, tail=tail, chunks=bad, name="k_recompute")
    layer = Recompute(*separable("group", 1, 1, False, False, "s"), name="s_recompute")
    with pytest.raises(ValueError, match="mixes channels"):
        layer.chunks = 2  # checked when set after construction too
