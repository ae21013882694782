"""The rewrite on models no one here wrote: keras-hub's task models and backbones,
built from their classes with random weights (no preset is downloaded), and
keras.applications families whose variable paths come from name scopes, nested
`Sequential`s and global counters. Each: no crash, the same variable paths,
inference outputs equal, and float32 training gradients as close to a float64
stock reference as stock's own float32 gradients are.

keras-hub is a test-only dependency, installed with --no-deps (docs/testing.md).
"""

import importlib.util
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg import memory
from tfseg.layers import InplaceLayerNormalization, LeanMultiHeadAttention
from tests.memory.test_rewrite import train_step

keras_hub = pytest.importorskip("keras_hub")


# The benchmark's builders (benchmarks/rewrite.py), at tiny widths.
_spec = importlib.util.spec_from_file_location(
    "rewrite_benchmark", pathlib.Path(__file__).parents[2] / "benchmarks" / "rewrite.py")
benchmark = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(benchmark)


def deeplab_v3():
    return benchmark.deeplab_v3(keras_hub, None, stem=16, filters=[64, 16, 32, 32],
                                blocks=[1, 1, 1, 1], rates=[2, 4, 6], projection=16,
                                classes=3), 64


def segformer():
    return benchmark.segformer(keras_hub, 64, dims=[8, 16, 24, 32], depths=[1, 1, 1, 1],
                               heads=[1, 1, 2, 2], projection=16, classes=3), 64


def vit():
    return benchmark.vit(keras_hub, 32, patch=8, layers=2, heads=2, width=16, mlp=32,
                         classes=3), 32


def csp_darknet():
    return keras_hub.models.CSPNetBackbone(
        stem_filters=16, stem_kernel_size=3, stem_strides=2, stackwise_depth=[1, 1],
        stackwise_strides=[2, 2], stackwise_num_filters=[16, 32], block_type="dark_block",
        stage_type="csp", expand_ratio=[2.0, 1.0], bottle_ratio=[0.5, 1.0],
        block_ratio=[1.0, 0.5], down_growth=True, image_shape=(None, None, 3)), 64


def convnext_tiny():
    return keras.applications.ConvNeXtTiny(weights=None, input_shape=(32, 32, 3), classes=3,
                                           include_preprocessing=False), 32


def nasnet_mobile():
    return keras.applications.NASNetMobile(weights=None, input_shape=(32, 32, 3), classes=3), 32


MODELS = [deeplab_v3, segformer, vit, csp_darknet,
          pytest.param(convnext_tiny, marks=pytest.mark.slow),
          pytest.param(nasnet_mobile, marks=pytest.mark.slow)]


def twins(build):
    """The model built in float32 and in float64, with the same weights."""
    model, size = build()
    policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float64")
    try:
        reference, _ = build()
    finally:
        keras.config.set_dtype_policy(policy)
    reference.set_weights(model.get_weights())  # built in the same order: by position
    for layer in model._flatten_layers() + reference._flatten_layers():
        if isinstance(layer, keras.layers.Dropout):  # random masks differ per model
            layer.rate = 0.0
    return model, reference, size


def gradients(model, images):
    _, grads = train_step(model, images)
    return {path: tf.convert_to_tensor(g).numpy() for path, g in grads.items()}


@pytest.mark.parametrize("build", MODELS, ids=lambda build: build.__name__)
def test_the_rewrite_keeps_paths_outputs_and_float32_gradients(build):
    model, reference, size = twins(build)
    new = memory.rewrite(model)
    assert not any(type(layer).__module__.startswith("tfseg")  # the user's model as it was
                   for layer in model._flatten_layers())
    assert sorted(w.path for w in new.weights) == sorted(w.path for w in model.weights)
    images = np.random.RandomState(0).rand(2, size, size, 3)
    np.testing.assert_allclose(new(images.astype("float32"), training=False).numpy(),
                               model(images.astype("float32"), training=False).numpy(),
                               rtol=1e-5, atol=1e-5)
    exact = dict(zip((w.path for w in model.trainable_weights),
                     gradients(reference, images).values()))
    stock = gradients(model, images.astype("float32"))
    rewritten = gradients(new, images.astype("float32"))
    assert stock.keys() == rewritten.keys() == exact.keys()
    scale = max(np.abs(g).max() for g in exact.values())
    error_stock = max(np.abs(stock[p] - g).max() for p, g in exact.items()) / scale
    error_new = max(np.abs(rewritten[p] - g).max() for p, g in exact.items()) / scale
    assert error_new <= 4 * error_stock + 1e-6


def test_vits_subclassed_blocks_get_the_transformer_twins():
    """keras-hub's ViTEncoder is one subclassed layer holding the blocks; its config
    rebuilds it, so the rewritten model's copy has output-only layer norms and lean
    attention inside (SegFormer's MiT blocks do not rebuild from their config)."""
    model, _ = vit()
    kinds = {type(layer) for layer in memory.rewrite(model)._flatten_layers()}
    assert {InplaceLayerNormalization, LeanMultiHeadAttention} <= kinds
