"""keras.applications backbones (weights=None, files the tests write): end points at
strides 4 and 32 in every constructor, tfseg's [-1, 1] input turned into what the
weights expect, dilation to output strides 8 and 16 with the same variables, and
DeepLabv3+ on them (ResNet-50, memory saving included)."""

import math

import keras
import numpy as np
import pytest

from tfseg import memory
from tfseg.config import Config
from tfseg.config import registry
from tfseg.config.names import APPLICATION_BACKBONES, BACKBONES, BUILTIN_BACKBONE
from tfseg.errors import InputError
from tfseg.layers import ActivationConv2D, InplaceBatchNormalization
from tfseg.models import APPLICATIONS, application_backbone, normalize
from tfseg.models.backbone import feature_strides
from tfseg.models.dilate import dilate, dilation_changes
from tfseg.runtime import builders
from tests.memory.test_rewrite import train_step

H, W = 97, 129
# One backbone per family (preprocessing and padding kind) in CI; every one with -m full.
FAMILIES = ("resnet50", "resnet50v2", "mobilenetv2", "efficientnetb0")
EVERY = [name if name in FAMILIES else pytest.param(name, marks=pytest.mark.full)
         for name in APPLICATION_BACKBONES]


def uint8_images(n=1, seed=0):
    return np.random.RandomState(seed).randint(0, 256, (n, H, W, 3)).astype("uint8")


def keras_preprocessed(name, images):
    """What the constructor's ImageNet weights are fed: its module's preprocess_input."""
    module = {"caffe": keras.applications.resnet, "tf": keras.applications.resnet_v2,
              "raw": keras.applications.efficientnet}[APPLICATIONS[name].preprocessing]
    return module.preprocess_input(images.astype("float32"))


def stock_constructor(name):
    return getattr(keras.applications, APPLICATIONS[name].constructor)(
        include_top=False, weights=None, input_shape=(None, None, 3))


def assert_close(actual, expected, rtol=1e-4):
    """Within `rtol` of the largest value (float32 sums of thousands of terms)."""
    expected = keras.ops.convert_to_numpy(expected)
    scale = max(float(np.abs(expected).max()), 1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(actual), expected, atol=rtol * scale)


@pytest.mark.parametrize("name", EVERY)
def test_end_points_are_at_stride_4_and_32_with_all_the_constructors_variables(name):
    backbone = application_backbone(name)
    assert feature_strides(backbone) == {"low_level": 4, "out": 32}
    # "out" is the constructor's last layer: nothing of the model is left out.
    assert len(backbone.weights) == len(stock_constructor(name).weights)


@pytest.mark.parametrize("name", FAMILIES)
def test_a_saved_constructor_loads_and_normalised_input_is_what_its_weights_expect(
        name, tmp_path):
    """A backbone built from a constructor's `.weights.h5`, on tfseg's normalised images,
    computes what that constructor computes on `preprocess_input` of the same pixels."""
    stock = stock_constructor(name)
    rng = np.random.RandomState(1)
    for w in stock.weights:  # moving statistics too: not the initial values
        w.assign(w.numpy() * rng.uniform(0.5, 1.5, w.shape).astype("float32"))
    path = str(tmp_path / f"{name}.weights.h5")
    stock.save_weights(path)
    backbone = application_backbone(name, weights=path)
    images = uint8_images()
    ours = backbone(normalize(images), training=False)
    spec = APPLICATIONS[name]
    theirs = keras.Model(stock.input, [stock.get_layer(spec.low_level).output, stock.output])(
        keras_preprocessed(name, images), training=False)
    assert_close(ours["low_level"], theirs[0])
    assert_close(ours["out"], theirs[1])


@pytest.mark.parametrize("name", FAMILIES)
def test_dilation_gives_strides_8_and_16_with_the_same_variables(name):
    stock = application_backbone(name)
    images = normalize(uint8_images())
    before = stock(images, training=False)
    assert dilation_changes(stock, 32) == {}
    same = dilate(stock, 32)
    for key in ("low_level", "out"):
        np.testing.assert_array_equal(same(images, training=False)[key], before[key])
    low = before["low_level"].shape[1:3]
    for output_stride in (8, 16):
        dilated = dilate(stock, output_stride)
        assert [w.path for w in dilated.weights] == [w.path for w in stock.weights]
        for new, old in zip(dilated.weights, stock.weights):
            np.testing.assert_array_equal(new.numpy(), old.numpy())
        assert feature_strides(dilated) == {"low_level": 4, "out": output_stride}
        out = dilated(images, training=False)
        # On the odd input too: each stage past the cut keeps its input's size
        # (explicit paddings of stride-2 convs made 'same' for stride 1).
        assert out["low_level"].shape == before["low_level"].shape
        assert out["out"].shape[1:3] == tuple(math.ceil(s * 4 / output_stride) for s in low)
        assert np.isfinite(out["out"].numpy()).all()


def test_layers_keras_names_by_a_counter_get_the_same_names_in_every_build():
    """EfficientNet leaves its Normalization unnamed: Keras would name the second
    build's "normalization_1", and a checkpoint keyed by variable path would miss it."""
    first, second = application_backbone("efficientnetb0"), application_backbone("efficientnetb0")
    assert [w.path for w in first.weights] == [w.path for w in second.weights]
    assert "normalization/mean" in {w.path for w in first.weights}


def test_the_configs_table_is_the_one_built_from_and_an_unknown_name_is_one_line():
    """--backbone is checked without TensorFlow against ``tfseg.config.registry``'s table,
    the very one built from here: every entry names a keras.applications constructor."""
    assert APPLICATIONS is registry.APPLICATIONS
    assert BACKBONES == (BUILTIN_BACKBONE, *APPLICATIONS)
    assert all(callable(getattr(keras.applications, spec.constructor, None))
               for spec in APPLICATIONS.values())
    with pytest.raises(InputError) as error:
        application_backbone("resnet5")
    assert str(error.value) == (f"--backbone: must be one of {', '.join(APPLICATIONS)}, "
                                f"got 'resnet5' (did you mean resnet50?)")


def test_a_missing_or_mismatched_weights_file_is_one_line_naming_it(tmp_path):
    missing = str(tmp_path / "missing.weights.h5")
    with pytest.raises(InputError, match=f"^backbone weights {missing}: no such file"):
        application_backbone("mobilenetv2", weights=missing)
    other = str(tmp_path / "resnet.weights.h5")
    stock_constructor("resnet50").save_weights(other)
    with pytest.raises(InputError) as error:
        application_backbone("mobilenetv2", weights=other)
    message = str(error.value)
    assert message.startswith(f"backbone weights {other}: not the weights of "
                              f"keras.applications.MobileNetV2(include_top=False)")
    assert "\n" not in message
    junk = tmp_path / "junk.weights.h5"
    junk.write_text("not hdf5")
    with pytest.raises(InputError, match=f"^backbone weights {junk}: not the weights"):
        application_backbone("mobilenetv2", weights=str(junk))


def test_deeplab_on_mobilenetv2_at_output_stride_8_gives_input_size_logits():
    config = Config.from_flat(backbone="mobilenetv2", output_stride=8, width_multiplier=0.125)
    model = builders.model(config, num_classes=5)
    assert model.get_layer("aspp_sepconv1_depthwise").dilation_rate == (12, 12)
    logits = model(normalize(uint8_images(2)), training=True)
    assert logits.shape == (2, H, W, 5) and np.isfinite(logits.numpy()).all()


@pytest.fixture(scope="module")
def resnet50_deeplab():
    """ResNet-50 DeepLabv3+ at output stride 16 (the head at width 0.125), built once:
    25M parameters. No dropout, so training-mode outputs are deterministic."""
    config = Config.from_flat(backbone="resnet50", width_multiplier=0.125, dropout=0.0)
    return config, builders.model(config, num_classes=5)


def test_resnet50_deeplab_gives_input_size_logits(resnet50_deeplab):
    _, model = resnet50_deeplab
    assert model.get_layer("aspp_sepconv1_depthwise").dilation_rate == (6, 6)
    # The head is built on the backbone's graph: one flat model.
    assert not any(isinstance(layer, keras.Model) for layer in model.layers)
    assert model.get_layer("conv5_block3_2_conv").dilation_rate == (2, 2)
    logits = model(normalize(uint8_images(2)), training=False)
    assert logits.shape == (2, H, W, 5) and logits.dtype == "float32"


def test_resnet50_deeplab_memory_saving_keeps_its_outputs(resnet50_deeplab):
    config, stock = resnet50_deeplab
    saving = builders.model(config.replace(memory_saving=True), num_classes=5)
    assert isinstance(saving.get_layer("conv2_block1_1_bn"), InplaceBatchNormalization)
    rng = np.random.RandomState(2)
    for w in stock.weights:  # moving statistics too, so inference differs from training
        w.assign(w.numpy() * rng.uniform(0.8, 1.2, w.shape).astype("float32"))
    memory.copy_weights(stock, saving)
    images = normalize(uint8_images(2, seed=3))
    assert_close(saving(images, training=False), stock(images, training=False), rtol=1e-4)
    # Training mode: the twins' batch norms reduce in another order, float32 noise that
    # ~60 norms on batch statistics pass on (~2.5e-4 of the largest logit here; the two
    # agree exactly in float64).
    assert_close(saving(images, training=True), stock(images, training=True), rtol=1e-3)


@pytest.mark.slow
def test_resnet50_deeplab_memory_saving_trains_dilated_on_the_cpu(float64):
    """At output stride 16 conv5 is dilated; the memory-saving conv twins' backward
    pass runs there on the CPU too (a dilated Conv2D op has no CPU gradient kernel
    without oneDNN), and one training step's gradients are stock's (float64: float32
    reordering noise through ~60 batch norms is ~1% of some gradients)."""
    config = Config.from_flat(backbone="resnet50", width_multiplier=0.125, dropout=0.0)
    stock = builders.model(config, num_classes=5)
    saving = builders.model(config.replace(memory_saving=True), num_classes=5)
    assert isinstance(saving.get_layer("conv5_block2_2_conv"), ActivationConv2D)
    assert saving.get_layer("conv5_block2_2_conv").dilation_rate == (2, 2)
    memory.copy_weights(stock, saving)
    images = np.random.RandomState(4).uniform(-1, 1, (2, H, W, 3))
    _, want = train_step(stock, images)
    _, got = train_step(saving, images)
    assert got.keys() == want.keys()
    scale = max(float(np.abs(g.numpy()).max()) for g in want.values())
    for path, g in want.items():
        np.testing.assert_allclose(got[path].numpy(), g.numpy(), atol=1e-9 * scale, err_msg=path)
