import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg import memory
from tfseg.layers import InplaceBatchNormalization, Recompute
from tfseg.models import LayerPolicy, deeplab_v3_plus, normalize
from tests.conftest import TINY

H, W = 97, 129


def tiny_model(**kwargs):
    kwargs.setdefault("input_shape", (None, None, 3))
    return deeplab_v3_plus(5, **TINY, **kwargs)


def batch(n=2, seed=0):
    rng = np.random.RandomState(seed)
    images = rng.uniform(-1, 1, (n, H, W, 3)).astype("float32")
    labels = rng.randint(0, 5, (n, H, W)).astype("int32")
    labels[:, :5] = 255  # an ignore border, as real data has
    return images, labels


def loss_fn(labels, logits):
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=255)(
        labels, logits
    )


# The norm cannot change a shape: the sizes are checked per output stride, on one norm.
@pytest.mark.parametrize("output_stride", [8, 16, 32])
def test_logits_have_input_size_for_odd_inputs(output_stride):
    model = tiny_model(output_stride=output_stride)
    images, _ = batch()
    logits = model(images, training=True)
    assert logits.shape == (2, H, W, 5)
    assert logits.dtype == tf.float32
    assert np.isfinite(logits.numpy()).all()
    # The same weights accept other sizes without rebuilding, also ones that are not
    # a multiple of the stride plus one.
    assert model(images[:, :65, :81], training=False).shape == (2, 65, 81, 5)
    other = np.random.RandomState(1).uniform(-1, 1, (1, 100, 75, 3)).astype("float32")
    assert model(other, training=False).shape == (1, 100, 75, 5)


# What the norm can change: whether the training-mode logits are finite float32 ones.
@pytest.mark.parametrize("norm", ["sync_batch", "group"])
def test_other_norms_give_finite_float32_logits_in_training(norm):
    logits = tiny_model(norm=norm)(batch()[0], training=True)
    assert logits.shape == (2, H, W, 5) and logits.dtype == tf.float32
    assert np.isfinite(logits.numpy()).all()


@pytest.mark.parametrize("output_stride,atrous", [(8, 3), (16, 3), (32, 0)])
def test_full_model_matches_reference_size(output_stride, atrous, request):
    # Other strides are other models (dilation, ASPP branches): each is built here.
    model = (request.getfixturevalue("reference_deeplab") if output_stride == 16
             else deeplab_v3_plus(21, output_stride=output_stride))
    names = {layer.name for layer in model.layers}
    assert sum(f"aspp_sepconv{i}_depthwise" in names for i in (1, 2, 3)) == atrous
    if output_stride != 32:
        # The reference architecture (research/deeplab, 21 classes).
        assert model.count_params() == 41_258_213
    rates = [
        model.get_layer(f"aspp_sepconv{i + 1}_depthwise").dilation_rate[0] for i in range(atrous)
    ]
    assert rates == {8: [12, 24, 36], 16: [6, 12, 18], 32: []}[output_stride]


@pytest.mark.parametrize("norm", ["batch", "group"])
def test_one_training_step_gives_every_variable_a_finite_gradient(norm):
    # Tiny widths need fewer groups: a 1-channel group on the 1x1 pooled map
    # normalises to exactly 0 and has no gradient (the full model has 8 per group).
    model = tiny_model(policy=LayerPolicy(norm=norm, groups=8))
    images, labels = batch()
    with tf.GradientTape() as tape:
        loss = loss_fn(labels, model(images, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    assert np.isfinite(loss.numpy())
    for var, grad in zip(model.trainable_variables, grads):
        assert grad is not None, var.path
        assert np.isfinite(grad.numpy()).all(), var.path
        assert np.abs(grad.numpy()).max() > 0, var.path
    before = [v.numpy() for v in model.trainable_variables]
    keras.optimizers.SGD(0.01, momentum=0.9).apply_gradients(zip(grads, model.trainable_variables))
    assert all((b != v.numpy()).any() for b, v in zip(before, model.trainable_variables))


@pytest.mark.parametrize("norm", ["batch", "group"])
def test_config_round_trip_and_keras_file_give_identical_outputs(tmp_path, norm):
    model = tiny_model(norm=norm)
    rng = np.random.RandomState(1)
    for w in model.weights:  # moving statistics too: they are saved state
        w.assign(w.numpy() + rng.uniform(0, 0.1, w.shape).astype("float32"))
    images, _ = batch()
    expected = model(images, training=False).numpy()

    clone = keras.Model.from_config(model.get_config())
    clone.set_weights(model.get_weights())
    np.testing.assert_array_equal(clone(images, training=False).numpy(), expected)

    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_array_equal(loaded(images, training=False).numpy(), expected)
    assert [layer.name for layer in loaded.layers] == [layer.name for layer in model.layers]


@pytest.mark.slow
def test_mixed_bfloat16_trains_and_keeps_float32_logits(mixed_bfloat16):
    model = tiny_model()
    assert model.get_layer("entry_block1_sepconv1_pointwise").compute_dtype == "bfloat16"
    # The logits conv itself computes in float32, not only the final resize.
    assert model.get_layer("logits").compute_dtype == "float32"
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9), loss=loss_fn)
    images, labels = batch()
    loss = model.train_on_batch(images, labels)
    assert np.isfinite(loss)
    logits = model(images, training=False)
    assert logits.dtype == tf.float32
    assert all(v.dtype == "float32" for v in model.trainable_variables)


def test_normalize_maps_uint8_to_unit_range():
    out = normalize(np.array([0, 127.5, 255], "float32"))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(out), [-1, 0, 1])


def small_backbone(strides=(2, 2, 2, 2), input_shape=(None, None, 3), low_level=2):
    """conv -> BN -> ReLU units at `strides`, the output of unit `low_level` (stride 4
    by default) and a last dilated separable conv ("out", stride 16 by default)."""
    image = keras.Input(input_shape, name="small_image")
    x, features = image, {}
    for i, stride in enumerate(strides):
        x = keras.layers.Conv2D(8 * (1 + i // 2), 3, strides=stride, padding="same",
                                use_bias=False, name=f"small_conv{i + 1}")(x)
        x = keras.layers.ReLU(name=f"small_conv{i + 1}_relu")(
            keras.layers.BatchNormalization(name=f"small_conv{i + 1}_bn")(x))
        if i + 1 == low_level:
            features["low_level"] = x
    # ReLU -> depthwise -> BN -> pointwise: a separable conv for the memory rewrite.
    x = keras.layers.DepthwiseConv2D(3, padding="same", dilation_rate=2, use_bias=False,
                                     name="small_sep_depthwise")(x)
    x = keras.layers.BatchNormalization(name="small_sep_depthwise_bn")(x)
    features["out"] = keras.layers.Conv2D(24, 1, name="small_sep_pointwise")(x)
    return keras.Model(image, features, name="small")


def on_backbone(backbone, **kwargs):
    return deeplab_v3_plus(5, backbone=backbone, width_multiplier=0.125, **kwargs)


def test_custom_backbone_gives_input_size_logits_and_trains_the_backbone():
    backbone = small_backbone()
    model = on_backbone(backbone)
    # The head is built on the backbone's graph, not around a nested copy of it.
    assert {layer.name for layer in backbone.layers} < {layer.name for layer in model.layers}
    assert model.get_layer("aspp_sepconv1_depthwise").dilation_rate == (6, 6)  # stride 16
    images, labels = batch()
    with tf.GradientTape() as tape:
        logits = model(images, training=True)
        loss = loss_fn(labels, logits)
    assert logits.shape == (2, H, W, 5) and logits.dtype == tf.float32
    grads = tape.gradient(loss, backbone.trainable_variables)
    assert len(grads) == 4 + 4 * 2 + 5  # convs, BN scales and offsets, the separable conv's
    for var, grad in zip(backbone.trainable_variables, grads):
        assert grad is not None, var.path
        assert np.isfinite(grad.numpy()).all() and np.abs(grad.numpy()).max() > 0, var.path
    assert model(images[:, :65, :81], training=False).shape == (2, 65, 81, 5)


@pytest.mark.parametrize("strides,input_shape,output_stride,atrous", [
    ((2, 2, 2, 1), (None, None, 3), 8, 3),
    ((2, 2, 2, 2), (H, W, 3), 16, 3),
    ((2, 2, 2, 2, 2), (None, None, 3), 32, 0),
])
def test_backbone_output_stride_is_inferred_from_shapes(
        strides, input_shape, output_stride, atrous):
    model = on_backbone(small_backbone(strides, input_shape))
    names = {layer.name for layer in model.layers}
    assert sum(f"aspp_sepconv{i}_depthwise" in names for i in (1, 2, 3)) == atrous
    if atrous:
        rate = {8: 12, 16: 6}[output_stride]
        assert model.get_layer("aspp_sepconv1_depthwise").dilation_rate == (rate, rate)
    images, _ = batch(1)
    assert model(images, training=False).shape == (1, H, W, 5)


def test_memory_saving_rewrites_the_backbone_too_and_keeps_outputs():
    backbone = small_backbone()
    stock = on_backbone(backbone, dropout=0.0)
    saving = on_backbone(backbone, dropout=0.0, memory_saving=True)
    assert isinstance(saving.get_layer("small_conv2_bn"), InplaceBatchNormalization)
    assert isinstance(saving.get_layer("small_sep_depthwise_recompute"), Recompute)
    assert type(stock.get_layer("small_conv2_bn")) is keras.layers.BatchNormalization
    rng = np.random.RandomState(1)
    for w in stock.weights:  # moving statistics too, so inference differs from training
        w.assign(w.numpy() + rng.uniform(0, 0.1, w.shape).astype("float32"))
    memory.copy_weights(stock, saving)
    images, _ = batch()
    # Training: the twins' fused batch-norm kernels reduce in another order than Keras'
    # moments, float32 rounding that the layers pass on (exact in float64: tests/memory).
    for training, atol in ((False, 1e-5), (True, 2e-4)):
        np.testing.assert_allclose(saving(images, training=training).numpy(),
                                   stock(images, training=training).numpy(), atol=atol)


def test_keras_applications_backbone_builds_and_runs():
    net = keras.applications.MobileNetV2(
        weights=None, include_top=False, input_shape=(H, W, 3), alpha=0.35)
    backbone = keras.Model(net.input, {"low_level": net.get_layer("block_2_add").output,
                                       "out": net.get_layer("block_12_add").output})
    model = on_backbone(backbone)
    assert model.get_layer("aspp_sepconv1_depthwise").dilation_rate == (6, 6)  # stride 16
    images, _ = batch(1)
    logits = model(images, training=False)
    assert logits.shape == (1, H, W, 5) and np.isfinite(logits.numpy()).all()


def test_backbone_refuses_xception_options_and_a_broken_contract():
    backbone = small_backbone()
    with pytest.raises(ValueError, match="recompute=.*names Xception-65 blocks"):
        on_backbone(backbone, recompute=("middle",))
    with pytest.raises(ValueError, match=r"\['middle_repeats'\] only apply"):
        on_backbone(backbone, middle_repeats=2)
    with pytest.raises(ValueError, match="output_stride=8, but .* at stride 16"):
        on_backbone(backbone, output_stride=8)
    image = backbone.inputs[0]
    out = backbone.output["out"]
    with pytest.raises(ValueError, match=r"no \['low_level'\]"):
        on_backbone(keras.Model(image, {"out": out}))
    with pytest.raises(ValueError, match="whose output is a dict"):
        on_backbone(keras.Model(image, [backbone.output["low_level"], out]))
    with pytest.raises(ValueError, match="'low_level' finer"):
        on_backbone(small_backbone(low_level=4))
