"""The reference conventions as model options: per-part norm epsilon and resize mode."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg import memory
from tfseg.layers import InplaceBatchNormalization, ResizeLike
from tfseg.models import REFERENCE_CONVENTIONS, LayerPolicy, part_of
from tests.models.test_deeplab import batch, tiny_model


def norms(model):
    """Every norm layer, those inside Recompute blocks too."""
    kinds = (keras.layers.BatchNormalization, keras.layers.GroupNormalization)
    return [layer for layer in model._flatten_layers() if isinstance(layer, kinds)]


@pytest.mark.parametrize("memory_saving", [False, True])
@pytest.mark.parametrize("norm,output_stride", [("batch", 8), ("batch", 32), ("group", 16)])
def test_head_epsilon_sets_aspp_and_decoder_norms_only(norm, output_stride, memory_saving):
    model = tiny_model(norm=norm, output_stride=output_stride, memory_saving=memory_saving,
                       head_epsilon=1e-5, policy=LayerPolicy(norm=norm, groups=8))
    found = {(part_of(layer.name), layer.epsilon) for layer in norms(model)}
    heads = {part for part, eps in found if eps == 1e-5}
    assert heads == {"aspp", "decoder"}
    backbone = {part for part, eps in found if eps == 1e-3}
    assert backbone == {"entry_flow", "middle_flow", "exit_flow"}
    assert len(found) == 5  # and no other epsilon, no unnamed norm
    if memory_saving:
        assert any(isinstance(layer, InplaceBatchNormalization) for layer in norms(model)) \
            == (norm == "batch")
    default = tiny_model(norm=norm, policy=LayerPolicy(norm=norm, groups=8))
    assert {layer.epsilon for layer in norms(default)} == {1e-3}  # today's model


@pytest.mark.parametrize("memory_saving", [False, True])
def test_head_batch_norm_at_1e5_is_tf_batch_normalization_in_inference(memory_saving):
    model = tiny_model(head_epsilon=1e-5, memory_saving=memory_saving)
    # A decoder norm: ASPP's projection norm stays stock (a stock ReLU reads it).
    layer = model.get_layer("decoder_projection_bn")
    assert isinstance(layer, InplaceBatchNormalization) == memory_saving
    rng = np.random.RandomState(3)
    channels = layer.gamma.shape[0]
    gamma, beta, mean = (rng.randn(channels).astype("float32") for _ in range(3))
    # Variances near the epsilon, where 1e-5 and Keras' default 1e-3 differ most.
    variance = (10 ** rng.uniform(-6, -2, channels)).astype("float32")
    layer.set_weights([gamma, beta, mean, variance])
    x = (rng.randn(2, 5, 7, channels) * np.sqrt(variance) + mean).astype("float32")
    expected = tf.nn.batch_normalization(x, mean, variance, beta, gamma, variance_epsilon=1e-5)
    np.testing.assert_allclose(layer(x, training=False).numpy(), expected.numpy(),
                               rtol=1e-5, atol=1e-5)
    other = tf.nn.batch_normalization(x, mean, variance, beta, gamma, variance_epsilon=1e-3)
    assert np.abs(other.numpy() - expected.numpy()).max() > 1.0


def test_resize_convention_reaches_every_resize_and_survives_the_rewrite():
    for memory_saving in (False, True):
        model = tiny_model(resize="align_corners", memory_saving=memory_saving)
        resizes = [layer for layer in model._flatten_layers() if isinstance(layer, ResizeLike)]
        assert sorted(layer.name for layer in resizes) == [
            "aspp_pool_resize", "decoder_upsample", "logits_resize"]
        assert all(layer.align_corners for layer in resizes)
    assert not any(layer.align_corners for layer in tiny_model().layers
                   if isinstance(layer, ResizeLike))
    with pytest.raises(ValueError, match="resize must be one of"):
        tiny_model(resize="bicubic")
    with pytest.raises(ValueError, match="head_epsilon must be > 0"):
        tiny_model(head_epsilon=0.0)


@pytest.mark.parametrize("output_stride", [8, 16])
def test_reference_conventions_stock_and_memory_saving_give_the_same_logits(output_stride):
    conventions = dict(REFERENCE_CONVENTIONS, output_stride=output_stride, dropout=0.0)
    stock = tiny_model(**conventions)
    saving = tiny_model(**conventions, memory_saving=True, recompute=("middle",))
    rng = np.random.RandomState(4)
    for w in stock.weights:  # moving statistics too, small variances included
        w.assign(w.numpy() * rng.uniform(0.01, 1.5, w.shape).astype("float32"))
    memory.copy_weights(stock, saving)
    images, _ = batch()
    # Training: the twins' fused batch-norm kernels reduce in another order than Keras'
    # moments, float32 rounding that the layers pass on (exact in float64: tests/memory).
    for training, atol in ((False, 2e-5), (True, 3e-4)):
        np.testing.assert_allclose(saving(images, training=training).numpy(),
                                   stock(images, training=training).numpy(), atol=atol)
    # The conventions change the numbers: the same weights under today's defaults differ.
    today = tiny_model(output_stride=output_stride, dropout=0.0)
    memory.copy_weights(stock, today)
    assert np.abs(today(images, training=False).numpy()
                  - stock(images, training=False).numpy()).max() > 1e-3
