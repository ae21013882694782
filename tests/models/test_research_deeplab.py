"""Importing research/deeplab checkpoints: TF1 name-keyed checkpoints written here from tfseg
models, under research/deeplab's names (read from its core/xception.py and model.py)."""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg import memory
from tfseg.errors import InputError
from tfseg.models import (REFERENCE_CONVENTIONS, deeplab_v3_plus, from_research_deeplab,
                          load_research_deeplab, research_deeplab_options)
from tfseg.models.research_deeplab import reference_names

SMALL = dict(width_multiplier=0.25, middle_repeats=2)
CLASSES = 5
# tfseg weight path -> research/deeplab variable, written independently of the module's
# rule (which builds names from the block specs): string rewrites, applied in order.
_REWRITES = [
    (r"^entry_conv(\d)", r"xception_65/entry_flow/conv1_\1"),
    (r"^(entry|exit)_block(\d)_", r"xception_65/\1_flow/block\2/unit_1/xception_module/"),
    (r"^middle_unit(\d+)_", r"xception_65/middle_flow/block1/unit_\1/xception_module/"),
    (r"/xception_module/sepconv(\d)_", r"/xception_module/separable_conv\1_"),
    (r"^aspp_pool_conv", "image_pooling"), (r"^aspp_conv1x1", "aspp0"),
    (r"^aspp_sepconv(\d)", r"aspp\1"), (r"^aspp_projection", "concat_projection"),
    (r"^decoder_projection", "decoder/feature_projection0"),
    (r"^decoder_conv(\d)", lambda m: f"decoder/decoder_conv{int(m.group(1)) - 1}"),
    (r"^logits/", "logits/semantic/"),
    (r"_bn/", "/BatchNorm/"), (r"depthwise/kernel$", "depthwise/depthwise_weights"),
    (r"/kernel$", "/weights"), (r"/bias$", "/biases"),
]


def reference_name(path):
    for pattern, replacement in _REWRITES:
        path = re.sub(pattern, replacement, path)
    return path


def write_tf1_checkpoint(prefix, arrays):
    """A TF1 checkpoint keyed by name, as research/deeplab's Saver writes it."""
    with tf.Graph().as_default():
        variables = {name: tf.compat.v1.Variable(value) for name, value in arrays.items()}
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            return saver.save(session, str(prefix))


def source_model(**kwargs):
    """A small model with the reference's conventions and weights away from their
    initial values (moving statistics too)."""
    model = deeplab_v3_plus(CLASSES, **SMALL, **REFERENCE_CONVENTIONS, **kwargs)
    rng = np.random.RandomState(0)
    for w in model.weights:
        value = w.numpy() * rng.uniform(0.5, 1.5, w.shape)
        if "variance" not in w.path:
            value += rng.normal(0, 0.05, w.shape)
        w.assign(value.astype("float32"))
    return model


def arrays_of(model):
    return {reference_name(path): v.numpy()
            for path, v in memory.variables_by_path(model).items()}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """(model, checkpoint prefix, {reference name: array}); the checkpoint also holds
    training state research/deeplab's have: global_step and Momentum slots."""
    model = source_model()
    arrays = arrays_of(model)
    extra = {"global_step": np.int64(100),
             "logits/semantic/weights/Momentum": arrays["logits/semantic/weights"]}
    prefix = write_tf1_checkpoint(tmp_path_factory.mktemp("zoo") / "model.ckpt",
                                  {**arrays, **extra})
    return model, prefix, arrays


def images(size=(65, 81), seed=0):
    return np.random.RandomState(seed).uniform(-1, 1, (2, *size, 3)).astype("float32")


def test_the_rule_names_research_deeplabs_732_variables(reference_deeplab):
    model = reference_deeplab  # research/deeplab's xception_65, OS16, 21 classes
    names = reference_names(16, 3)
    variables = memory.variables_by_path(model)
    assert len(names) == len(variables) == 732
    assert {path for _, path, _ in names} == set(variables)
    assert all(name == reference_name(path) for name, path, _ in names)
    assert sum(int(np.prod(variables[path].shape)) for _, path, _ in names) == 41_258_213
    # Names as research/deeplab's code builds them (core/xception.py, model.py).
    for name in ["xception_65/entry_flow/conv1_1/weights",
                 "xception_65/entry_flow/block2/unit_1/xception_module/shortcut/BatchNorm/beta",
                 "xception_65/middle_flow/block1/unit_16/xception_module/"
                 "separable_conv3_depthwise/depthwise_weights",
                 "xception_65/exit_flow/block2/unit_1/xception_module/"
                 "separable_conv3_pointwise/BatchNorm/moving_variance",
                 "image_pooling/BatchNorm/gamma", "aspp0/weights", "aspp3_pointwise/weights",
                 "concat_projection/BatchNorm/moving_mean", "decoder/feature_projection0/weights",
                 "decoder/decoder_conv1_depthwise/depthwise_weights", "logits/semantic/biases"]:
        assert name in {n for n, _, _ in names}, name


@pytest.mark.parametrize("kwargs", [{}, {"memory_saving": True},
                                    {"memory_saving": True, "recompute": ("middle",)}])
def test_round_trip_gives_the_source_models_logits(source, kwargs):
    model, prefix, arrays = source
    assert research_deeplab_options(prefix) == dict(num_classes=CLASSES, **SMALL,
                                                    **REFERENCE_CONVENTIONS)
    reports = []
    imported = from_research_deeplab(prefix, log=reports.append, **kwargs)
    (report,) = reports
    assert len(report.loaded) == len(arrays) and set(report.loaded) == set(arrays)
    assert report.skipped == report.initialised == report.notes == ()
    assert set(report.ignored) == {"global_step", "logits/semantic/weights/Momentum"}
    assert report.parameters == model.count_params()
    assert str(report).startswith(f"research/deeplab checkpoint {prefix}: loaded "
                                  f"{len(arrays)} variables")
    x = images()
    expected = model(x, training=False).numpy()
    got = imported(x, training=False).numpy()
    if kwargs:
        np.testing.assert_allclose(got, expected, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, expected)


def test_output_stride_8_loads_the_same_checkpoint(source):
    _, prefix, _ = source
    imported = from_research_deeplab(prefix, output_stride=8, log=lambda r: None)
    # A source built at stride 8 with those weights gives the same logits.
    twin = source_model(output_stride=8)
    load_research_deeplab(twin, prefix)
    x = images((97, 129))
    np.testing.assert_array_equal(imported(x, training=False).numpy(),
                                  twin(x, training=False).numpy())
    assert imported.get_layer("aspp_sepconv1_depthwise").dilation_rate == (12, 12)


def test_class_count_mismatch_skips_the_logits_and_says_so(source):
    model, prefix, arrays = source
    reports = []
    imported = from_research_deeplab(prefix, num_classes=3, log=reports.append)
    (report,) = reports
    assert report.skipped == ("logits/semantic/weights", "logits/semantic/biases")
    assert report.initialised == ("logits/kernel", "logits/bias")
    assert report.notes == (f"logits: {CLASSES} classes in the checkpoint, 3 in the model",)
    assert len(report.loaded) == len(arrays) - 2
    assert "skipped 2 (logits: 5 classes in the checkpoint, 3 in the model)" in str(report)
    assert imported.output_shape[-1] == 3
    np.testing.assert_array_equal(imported.get_layer("decoder_conv2_pointwise").kernel.numpy(),
                                  arrays["decoder/decoder_conv1_pointwise/weights"])
    np.testing.assert_array_equal(imported.get_layer("logits").bias.numpy(), np.zeros(3))


def test_backbone_only_checkpoint_loads_the_backbone_and_leaves_the_heads(source, tmp_path):
    model, _, arrays = source
    backbone = {n: a for n, a in arrays.items() if n.startswith("xception_65/")}
    channels = model.get_layer("exit_block2_sepconv3_pointwise").kernel.shape[-1]
    classifier = {"xception_65/logits/weights": np.ones((1, 1, channels, 1001), "float32"),
                  "xception_65/logits/biases": np.zeros(1001, "float32")}
    prefix = write_tf1_checkpoint(tmp_path / "imagenet.ckpt", {**backbone, **classifier})
    assert research_deeplab_options(prefix)["num_classes"] is None
    with pytest.raises(InputError, match=f"^{prefix}: a backbone-only checkpoint .* "
                                         f"pass num_classes$"):
        from_research_deeplab(prefix)
    reports = []
    imported = from_research_deeplab(prefix, num_classes=7, log=reports.append,
                                     memory_saving=True)
    (report,) = reports
    heads = [p for n, p, part in reference_names(2) if part != "backbone"]
    assert set(report.loaded) == set(backbone) and len(report.loaded) == len(backbone)
    assert set(report.skipped) == set(classifier)
    assert set(report.initialised) == set(heads)
    assert "backbone-only" in str(report) and f"initialised {len(heads)}" in str(report)
    weights = memory.variables_by_path(imported)
    for name, path, part in reference_names(2):
        if part == "backbone":
            np.testing.assert_array_equal(weights[path].numpy(), arrays[name], err_msg=path)
    np.testing.assert_array_equal(weights["aspp_projection_bn/moving_variance"].numpy(), 1.0)
    assert weights["logits/bias"].shape == (7,)


def test_missing_or_misshapen_variables_are_refused_in_one_line_naming_them(source, tmp_path):
    model, _, arrays = source
    name = ("xception_65/middle_flow/block1/unit_2/xception_module/"
            "separable_conv2_depthwise/BatchNorm/moving_variance")
    missing = write_tf1_checkpoint(tmp_path / "missing.ckpt",
                                   {n: a for n, a in arrays.items() if n != name})
    target = deeplab_v3_plus(CLASSES, **SMALL)
    before = [w.numpy() for w in target.weights]
    with pytest.raises(InputError, match=f"^{missing}: no variable {name} \\(for tfseg's "
                                         f"middle_unit2_sepconv2_depthwise_bn/moving_variance\\)$"):
        load_research_deeplab(target, missing)
    # Refused before anything was assigned.
    assert all((b == w.numpy()).all() for b, w in zip(before, target.weights))
    wrong = dict(arrays, **{"aspp0/weights": arrays["aspp0/weights"][:, :, :, :8]})
    wrong = write_tf1_checkpoint(tmp_path / "wrong.ckpt", wrong)
    with pytest.raises(InputError, match=f"^{wrong}: variable aspp0/weights has shape "
                                         r"\(1, 1, 512, 8\), tfseg's aspp_conv1x1/kernel needs "
                                         r"\(1, 1, 512, 64\)$"):
        from_research_deeplab(wrong)
    full = write_tf1_checkpoint(tmp_path / "full.ckpt", arrays)
    with pytest.raises(InputError, match=f"^{full}: no variable for tfseg's middle_unit3_"
                                         ".*the checkpoint has 2 middle units"):
        load_research_deeplab(deeplab_v3_plus(CLASSES, width_multiplier=0.25,
                                              middle_repeats=3), full)
    with pytest.raises(InputError, match="aspp1_depthwise/depthwise_weights has no "
                                         "counterpart aspp_sepconv1_depthwise/kernel"):
        from_research_deeplab(full, output_stride=32)


def test_other_files_and_group_norm_are_refused(source, tmp_path):
    _, prefix, _ = source
    text = tmp_path / "notes.txt"
    text.write_text("not a checkpoint")
    for path in (text, tmp_path / "absent.ckpt"):
        with pytest.raises(InputError, match=f"^{path}: not a readable TensorFlow checkpoint"):
            from_research_deeplab(path)
    keras_style = tf.train.Checkpoint(v=tf.Variable(1.0)).write(str(tmp_path / "tf2"))
    with pytest.raises(InputError, match="not a research/deeplab xception_65 checkpoint "
                                         r"\(no variable xception_65/entry_flow/conv1_1/weights\)"):
        from_research_deeplab(keras_style)
    with pytest.raises(InputError, match="batch-norm statistics; a group-norm model"):
        from_research_deeplab(prefix, norm="group")
    with pytest.raises(InputError, match="batch-norm statistics; a group-norm model"):
        load_research_deeplab(deeplab_v3_plus(CLASSES, norm="group", **SMALL), prefix)


def test_a_keras_file_keeps_the_imported_models_conventions(source, tmp_path):
    model, prefix, _ = source
    imported = from_research_deeplab(prefix, log=lambda r: None)
    path = str(tmp_path / "imported.keras")
    imported.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.get_layer("logits_resize").align_corners
    assert loaded.get_layer("aspp_projection_bn").epsilon == 1e-5
    x = images()
    np.testing.assert_array_equal(loaded(x, training=False).numpy(),
                                  model(x, training=False).numpy())
