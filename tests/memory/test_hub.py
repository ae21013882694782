"""The rewrite on models no one here wrote: keras-hub's task models and backbones,
built from their classes with random weights (no preset is downloaded), and
keras.applications families whose variable paths come from name scopes, nested
`Sequential`s and global counters. Each: no crash, the same variable paths,
inference outputs equal, and float32 training gradients within 1.5x of stock's own
float32 error against a float64 stock reference.

keras-hub is a test-only dependency, installed with --no-deps (docs/testing.md).
"""

import collections
import importlib.util
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg import memory
from tfseg.layers import (ActivationConv2D, ActivationDense, InplaceLayerNormalization, LeanMultiHeadAttention,
                          ResizedConcatConv2D, UpsampledConv2D)
from tests.extras import INSTALL, needs
from tests.memory.test_rewrite import assert_same_training_step, train_step

pytestmark = needs("hub", "keras_hub").marks
keras_hub = pytest.importorskip("keras_hub", reason=f"the 'hub' extra: {INSTALL['hub']}")


# The benchmark's builders (benchmarks/rewrite.py), at tiny widths; it imports its
# helpers from beside it, as when run as a script.
_folder = pathlib.Path(__file__).parents[2] / "benchmarks"
_spec = importlib.util.spec_from_file_location("rewrite_benchmark", _folder / "rewrite.py")
benchmark = importlib.util.module_from_spec(_spec)
sys.path.insert(0, str(_folder))
try:
    _spec.loader.exec_module(benchmark)
finally:
    sys.path.remove(str(_folder))


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


def deit():
    return benchmark.families.deit_tiny(keras_hub, 32, tiny=True), 32


def mobilenet_v3():
    return benchmark.families.mobilenet_v3_small(keras_hub, 64, tiny=True), 64


def sam():
    return benchmark.families.sam_vitdet(keras_hub, 64, tiny=True), 64


def swin():
    return benchmark.families.swin_tiny(keras_hub, 64, tiny=True), 64


MODELS = [deeplab_v3, segformer, vit, csp_darknet, deit, mobilenet_v3, sam,
          # 40-50 s; its attention: the next test's slow case
          pytest.param(swin, marks=[pytest.mark.slow, pytest.mark.full]),
          # 50-70 s; its twins: test_applications' ConvNeXtTiny cases
          pytest.param(convnext_tiny, marks=[pytest.mark.slow, pytest.mark.full]),
          # 60-80 s; its name scopes: test_rewrite's test_nested_sequentials_and_name_scopes
          pytest.param(nasnet_mobile, marks=[pytest.mark.slow, pytest.mark.full])]


# Four float32 ulps (2**-24 each) of the largest gradient: see the gradients' test.
FLOOR = 4 * 2.0 ** -24


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
    assert all(layer.rate == 0 for layer in new._flatten_layers()
               if isinstance(layer, keras.layers.Dropout))  # one function, no masks
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
    # A few float32 ulps of the largest gradient are no yardstick: ViT's stock error, at
    # 3 to 17 ulps over five weight seeds, gave ratios of 0.63 to 1.63, the highest where
    # stock's was least (3.2 ulps against 5.3); CSPDarkNet's, at 14 to 27, 0.67 to 1.30.
    assert error_new <= 1.5 * error_stock + FLOOR, (error_new, error_stock)


def test_vits_subclassed_blocks_get_the_transformer_twins():
    """keras-hub's ViTEncoder is one subclassed layer holding the blocks; its config
    rebuilds it, so the rewritten model's copy has output-only layer norms, lean
    attention and each MLP's GELU taken into its second Dense inside (SegFormer's MiT
    blocks do not rebuild from their config)."""
    model, _ = vit()
    layers = memory.rewrite(model)._flatten_layers()
    assert {InplaceLayerNormalization, LeanMultiHeadAttention} <= {type(l) for l in layers}
    fused = [layer for layer in layers if isinstance(layer, ActivationDense)]
    assert [(layer.name, layer.input_activation) for layer in fused] == [("dense_2", "gelu")] * 2


def test_deits_encoder_and_mobilenet_v3s_blocks_get_their_twins():
    """DeiT's encoder does not rebuild from its config and MobileNetV3's blocks fuse
    nothing whole: a registered copy and the blocks' traces (tfseg.memory.traced)."""
    model, _ = deit()
    layers = memory.rewrite(model)._flatten_layers()
    kinds = collections.Counter(type(layer) for layer in layers)
    blocks = sum(type(l).__name__ == "DeiTEncoderBlock" for l in model._flatten_layers())
    assert kinds[LeanMultiHeadAttention] == kinds[ActivationDense] == blocks >= 1
    assert kinds[InplaceLayerNormalization] == 2 * blocks + 1
    model, _ = mobilenet_v3()
    found = memory.changes(model).nested["mobile_net_backbone"]
    assert len(found.traced) >= 3 and found.fused and found.scaled and found.residual
    grouped = [l for l in memory.rewrite(model)._flatten_layers()
               if isinstance(l, ActivationConv2D) and l.groups > 1]
    assert grouped and all(l.groups == l.filters for l in grouped)


@pytest.mark.parametrize("case", ["sam", pytest.param("swin", marks=pytest.mark.slow)])
def test_sams_and_swins_attention_keep_no_probabilities_and_stay_exact(case, float64):
    """SAM's relative-position attention and Swin's window attention (its shift mask
    and relative bias) through `lean_attention`, in copies of blocks that neither
    rebuild from their configs nor trace (their windows divide the batch in Python):
    the copies share the blocks' variables (tfseg.memory.copies)."""
    from keras_hub.src.models.vit_det.vit_layers import MLP as ViTDetMLP

    from tfseg.layers.hub import LeanRelativeAttention, LeanViTDetMLP, LeanWindowAttention

    build, twin = {"sam": (sam, LeanRelativeAttention), "swin": (swin, LeanWindowAttention)}[case]
    model, size = build()
    for layer in model._flatten_layers():
        if isinstance(layer, keras.layers.Dropout):  # drop path stays: shared alike
            layer.rate = 0.0
    for w in model.trainable_weights:  # relative positions start at zero in SAM
        w.assign(np.random.RandomState(len(w.path)).uniform(-0.5, 0.5, w.shape))
    new = memory.rewrite(model, memory.RewriteOptions(weigh=False))
    kinds = collections.Counter(type(l) for l in new._flatten_layers())
    stock = sum(type(l) in twin.__mro__[1:2] for l in model._flatten_layers())
    assert kinds[twin] == stock >= 2
    assert kinds[LeanViTDetMLP] == sum(type(l) is ViTDetMLP for l in model._flatten_layers())
    assert sorted(w.path for w in new.weights) == sorted(w.path for w in model.weights)
    images = tf.constant(np.random.RandomState(0).rand(2, size, size, 3))
    assert_same_training_step(model, new, images)


def test_a_vit_mlp_with_dropout_between_its_dense_layers_fuses_and_draws_stocks_masks(float64):
    """ViT at dropout 0.1: the GELU and the dropout after it go into the second Dense
    (`LeanViTMLP`), the mask drawn again from Keras' seed: the training step is stock's,
    masks included, and the step keeps less, as at dropout 0."""
    from tfseg.layers.hub import LeanViTMLP
    from tfseg.memory.kept import step_kept_bytes

    def classifier(rate):
        backbone = keras_hub.models.ViTBackbone(
            image_shape=(32, 32, 3), patch_size=8, num_layers=1, num_heads=2, hidden_dim=16,
            mlp_dim=32, dropout_rate=rate, attention_dropout=0.0)
        return keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=3,
                                                   dropout=0.0)

    model = classifier(0.1)
    new = memory.rewrite(model)
    assert memory.changes(model.backbone).kept_stock == []
    kinds = collections.Counter(type(layer) for layer in new._flatten_layers())
    assert kinds[LeanViTMLP] == kinds[ActivationDense] == 1 and kinds[LeanMultiHeadAttention]
    assert sorted(w.path for w in new.weights) == sorted(w.path for w in model.weights)
    images = tf.constant(np.random.RandomState(0).rand(2, 32, 32, 3))
    assert_same_training_step(model, new, images)
    saved = {rate: step_kept_bytes(m, images) - step_kept_bytes(memory.rewrite(m), images)
             for rate, m in ((0.1, classifier(0.1)), (0.0, classifier(0.0)))}
    assert saved[0.1] >= saved[0.0] > 0, saved


def test_keras_hubs_transformer_encoder_fuses_its_feedforward_exactly(float64):
    x = keras.Input((9, 16))
    h = keras_hub.layers.TransformerEncoder(32, 2, activation="gelu", name="encoder")(x)
    model = keras.Model(x, keras.layers.Dense(3, name="head")(h))
    new = memory.rewrite(model)
    (fused,) = [l for l in new._flatten_layers() if isinstance(l, ActivationDense)]
    assert fused.name == "feedforward_output_dense" and fused.input_activation == "gelu"
    assert sorted(w.path for w in new.weights) == sorted(w.path for w in model.weights)
    assert_same_training_step(model, new, tf.constant(np.random.RandomState(0).randn(2, 9, 16)))


def test_segformers_mit_blocks_are_rebuilt_with_their_twins_and_stay_exact(float64):
    """MiT's blocks do not rebuild from their config: a registered function rebuilds
    them (tfseg/memory/hub_blocks.py), with output-only layer norms, the attention
    without its probabilities (their dropout, 0.1 in keras-hub, replayed from the seed)
    and MixFFN's tanh GELU taken into fc2. The step equals stock's, masks included."""
    from tfseg.layers.hub import LeanMixFFN, LeanSegFormerAttention

    model, size = segformer()
    attention = [l for l in model._flatten_layers()
                 if type(l).__name__ == "SegFormerMultiheadAttention"]
    assert attention and all(a.dropout.rate == 0.1 for a in attention)
    inside = {id(d) for a in attention for d in (a.dropout, a.proj_drop)}
    for layer in model._flatten_layers():  # the decoder's dropout, a layer both models
        if isinstance(layer, keras.layers.Dropout) and id(layer) not in inside:  # share: off
            layer.rate = 0.0
    # The decoder's resized maps go into its fuse conv (tests/memory/test_nested_concat.py),
    # exact to float32 only (TF's bilinear resize): here the blocks alone, exact.
    # Unweighed (every twin found; its weighing: the family test above), two traces less.
    unweighed = memory.RewriteOptions(weigh=False)
    assert any(isinstance(l, ResizedConcatConv2D)
               for l in memory.rewrite(model, unweighed)._flatten_layers())
    new = memory.rewrite(model, unweighed.replace(lean_upsampling=False))
    kinds = collections.Counter(type(l) for l in new._flatten_layers())
    assert kinds[LeanSegFormerAttention] == kinds[LeanMixFFN] == 4  # one block a stage
    fused = [l for l in new._flatten_layers() if isinstance(l, ActivationDense)]
    assert len(fused) == 4 and {l.input_activation for l in fused} == {"gelu_tanh"}
    assert kinds[InplaceLayerNormalization] >= 4 * 2
    assert sorted(w.path for w in new.weights) == sorted(w.path for w in model.weights)
    images = tf.constant(np.random.RandomState(0).rand(2, size, size, 3))
    assert_same_training_step(model, new, images)


def test_deeplab_v3s_classifier_takes_in_the_backbones_last_upsampling():
    """keras-hub's DeepLabV3 backbone ends in a bilinear upsampling to the image size,
    which only the segmenter's 1x1 classifier reads: the rewritten classifier convolves
    the small map and upsamples the class scores (tests/memory/test_nested.py)."""
    model, size = deeplab_v3()
    new = memory.rewrite(model)
    assert memory.changes(model).upsampled == [
        (f"{model.backbone.name}/backbone_output_upsampling", "segmentation_output")]
    assert isinstance(new.get_layer("segmentation_output"), UpsampledConv2D)
    assert new.outputs[0].shape == model.outputs[0].shape


# Either order of import: keras-hub's entries register themselves (tfseg.memory's hook),
# and tfseg alone imports no keras-hub.
FIRST_TFSEG = """
import sys, keras, tfseg.memory
assert not {"keras_hub", "tfseg.memory.hub_blocks", "tfseg.layers.hub"} & set(sys.modules)
import keras_hub
"""
FIRST_HUB = "import keras_hub, tfseg.memory\n"
TWIN = """
from keras_hub.src.models.mit.mit_layers import MixFFN
from tfseg.memory import RewriteOptions, blocks
print(blocks.twin(MixFFN(8, 32), RewriteOptions.none().replace(fuse_relu_conv=True))[0].__module__)
"""


@pytest.mark.parametrize("imports", [FIRST_TFSEG, FIRST_HUB], ids=["tfseg_first", "hub_first"])
def test_keras_hubs_entries_register_once_keras_hub_is_imported(imports):
    result = subprocess.run([sys.executable, "-c", imports + TWIN], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "tfseg.layers.hub"


def test_basnet_keeps_every_variable_of_its_encoder_and_checkpoints_load_both_ways(tmp_path):
    """BASNet tracks its whole ResNet encoder and calls all of it but the stem: the
    rewritten model holds those variables too."""
    encoder = keras_hub.models.ResNetBackbone(
        input_conv_filters=[64], input_conv_kernel_sizes=[7],
        stackwise_num_filters=[64, 64, 64, 64], stackwise_num_blocks=[1, 1, 1, 1],
        stackwise_num_strides=[1, 2, 2, 2], block_type="basic_block", use_pre_activation=False)
    backbone = keras_hub.models.BASNetBackbone(encoder, num_classes=1, image_shape=[32, 32, 3])
    stock = keras_hub.models.BASNetImageSegmenter(backbone)
    saving = memory.rewrite(stock)
    assert sorted(w.path for w in saving.weights) == sorted(w.path for w in stock.weights)
    images = np.random.RandomState(0).rand(2, 32, 32, 3).astype("float32")
    path = memory.checkpoint(stock).write(str(tmp_path / "stock"))
    memory.checkpoint(saving).read(path).assert_consumed()
    memory.checkpoint(stock).read(memory.checkpoint(saving).write(
        str(tmp_path / "saving"))).assert_consumed()
    np.testing.assert_allclose(saving(images), stock(images), atol=1e-5)
