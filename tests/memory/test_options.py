"""`RewriteOptions`: one frozen set of switches for the rewrite, and `none()` changing
nothing but the recompute segments."""

import dataclasses

import keras
import numpy as np
import pytest

from tfseg import memory
from tfseg.layers import Recompute
from tfseg.memory import RewriteOptions, blocks
from tfseg.models import deeplab_v3_plus
from tests.layers.twins import training_ops

# Tiny and odd-sized: every stride rounds, one middle unit to recompute.
TINY = dict(width_multiplier=0.125, middle_repeats=1, input_shape=(65, 97, 3))


def test_options_are_frozen_and_all_none_replace_name_the_same_fields():
    default = RewriteOptions()
    names = [field.name for field in dataclasses.fields(RewriteOptions)]
    # settings, not switches
    assert names[-5:] == ["chunked", "unpaid", "weigh", "depthwise_kernel", "fused_norm"]
    assert default.chunked == default.unpaid == () and default.weigh is True
    assert RewriteOptions.none().weigh is True  # nothing to weigh there, but not switched
    names = names[:-5]
    assert len(names) == 9 and RewriteOptions.names() == tuple(names)
    with pytest.raises(ValueError, match="unknown rewrite option"):
        default.on("unpaid")
    assert RewriteOptions.all() == default and all(getattr(default, n) for n in names)
    assert not any(getattr(RewriteOptions.none(), n) for n in names)
    with pytest.raises(dataclasses.FrozenInstanceError):
        default.fold_residual = False
    unfolded = default.replace(fold_residual=False)
    assert default.fold_residual and not unfolded.fold_residual
    assert [n for n in names if getattr(unfolded, n) != getattr(default, n)] == ["fold_residual"]
    with pytest.raises(TypeError):
        default.replace(fold_residuals=False)


def test_on_is_the_string_vocabulary_and_refuses_an_unknown_name():
    options = RewriteOptions.none().replace(lean_attention=True)
    assert options.on("lean_attention") and not options.on("fuse_relu_conv")
    with pytest.raises(ValueError, match="fuse_relu_convs"):
        options.on("fuse_relu_convs")
    with pytest.raises(ValueError, match="unknown rewrite option"):
        blocks.register_twin(keras.layers.Layer, "lean_atention")  # misspelt: refused now


def test_a_switch_passed_as_before_is_refused():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    with pytest.raises(TypeError, match="RewriteOptions"):
        memory.rewrite(memory.as_functional(model), False)
    with pytest.raises(TypeError):
        memory.changes(model, fuse_separable=False)


def _filled_fields(summary):
    """The names of `summary`'s records and plans that hold something."""
    plans = {name: getattr(summary, name)
             for name in ("replacements", "actions", "blocks", "inner", "cuts")}
    return [name for name, value in {**summary.records, **plans}.items() if value]


def test_none_changes_nothing_but_the_recompute_segments():
    stock = deeplab_v3_plus(5, dropout=0.0, **TINY)
    none = RewriteOptions.none()
    assert _filled_fields(memory.changes(stock, none)) == []
    assert _filled_fields(memory.changes(stock)) != []  # each trick finds something here
    same = memory.rewrite(stock, none)
    assert [type(l) for l in same.layers] == [type(l) for l in stock.layers]
    assert sorted(w.path for w in same.weights) == sorted(w.path for w in stock.weights)

    # DeepLab without memory_saving, recompute alone: stock layers, some in Recompute.
    built = deeplab_v3_plus(5, dropout=0.0, recompute=("middle_unit1", "decoder"), **TINY)
    segments = [l for l in built.layers if isinstance(l, Recompute)]
    assert [l.name for l in segments] == ["middle_unit1", "decoder"]
    assert all(l.tail is None for l in segments)  # no separable conv fused
    inside = {type(sub) for l in segments for sub in l.block._flatten_layers()}
    outside = {type(l) for l in built.layers if not isinstance(l, Recompute)}
    stock_kinds = {type(l) for l in stock._flatten_layers()}
    assert (inside | outside) - {keras.Model} <= stock_kinds
    assert sorted(w.path for w in built.weights) == sorted(w.path for w in stock.weights)
    rng = np.random.RandomState(0)
    for w in stock.weights:
        w.assign(w.numpy() + rng.uniform(0, 0.1, w.shape).astype("float32"))
    memory.copy_weights(stock, built)
    images = rng.uniform(-1, 1, (1, 65, 97, 3)).astype("float32")
    np.testing.assert_allclose(built(images, training=False), stock(images, training=False),
                               rtol=1e-5, atol=1e-5)


def test_chunked_names_separable_convs_by_their_depthwise_and_refuses_other_names():
    model = deeplab_v3_plus(3, **TINY)
    options = RewriteOptions(chunked=(("decoder_conv2_depthwise", 3),))
    assert memory.rewrite(model, options).get_layer("decoder_conv2_depthwise_recompute").chunks == 3
    assert ("1 of them run their backward passes in chunks of channels (decoder_conv2_depthwise)"
            in str(memory.changes(model, options)))
    with pytest.raises(ValueError, match=r"chunked names \['entry_conv1'\], which are not"):
        memory.rewrite(model, RewriteOptions(chunked=(("entry_conv1", 2),)))


def test_chunked_is_checked_and_ignored_without_separable_fusion():
    model = deeplab_v3_plus(3, **TINY)
    one = RewriteOptions(chunked=(("decoder_conv2_depthwise", 1),))  # named, not chunked
    assert memory.rewrite(model, one).get_layer("decoder_conv2_depthwise_recompute").chunks == 1
    memory.rewrite(model, one.replace(fuse_separable=False))  # nothing to chunk: no error
    for bad in ((("decoder_conv2_depthwise", 0),), (("decoder_conv2_depthwise", 2.5),),
                ("decoder_conv2_depthwise",)):
        with pytest.raises(ValueError, match="chunked takes"):
            RewriteOptions(chunked=bad)


@pytest.mark.parametrize("value", ["no", "false", "", None, 0, 1, 1.0, np.bool_(False)],
                         ids=repr)
def test_a_switch_that_is_not_a_bool_is_refused_naming_the_field_and_value(value):
    """"no" and "false" were taken and, being true, left every trick on; None was taken."""
    for name in RewriteOptions.names() + ("weigh",):
        message = (f"RewriteOptions.{name} must be True or False (a bool), got {value!r} "
                   f"(a {type(value).__name__})")
        with pytest.raises(TypeError) as raised:
            RewriteOptions(**{name: value})
        assert str(raised.value) == message
        with pytest.raises(TypeError, match="must be True or False"):
            RewriteOptions().replace(**{name: value})
    assert RewriteOptions(fuse_separable=False, inplace_norm=False).on("inplace_norm") is False


def test_chunked_and_unpaid_that_are_not_tuples_are_refused():
    for name, value in (("chunked", None), ("chunked", [("decoder_conv2_depthwise", 2)]),
                        ("chunked", "decoder_conv2_depthwise"), ("unpaid", None),
                        ("unpaid", [])):
        with pytest.raises(TypeError) as raised:
            RewriteOptions(**{name: value})
        assert str(raised.value) == (f"RewriteOptions.{name} must be a tuple, got {value!r} "
                                     f"(a {type(value).__name__})")
    with pytest.raises(ValueError, match="chunked takes .* got 3"):
        RewriteOptions(chunked=(3,))  # a TypeError of len() before


def test_forms_that_are_not_one_of_their_forms_are_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"^RewriteOptions.depthwise_kernel must be one of "
                                         r"\('auto', 'native', 'grouped'\), got 'cudnn'$"):
        RewriteOptions(depthwise_kernel="cudnn")
    with pytest.raises(ValueError, match=r"^RewriteOptions.fused_norm must be one of "):
        RewriteOptions().replace(fused_norm=False)


@keras.saving.register_keras_serializable(package="tests")
class Normed(keras.layers.Layer):
    """A subclassed block around a batch norm: rebuilt with the norm's twin inside."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.norm = keras.layers.BatchNormalization(name="norm")

    def call(self, x, training=None):
        return self.norm(x, training=training)


def _twins_model():
    """Conv -> norm -> ReLU -> depthwise conv -> a subclassed block's norm."""
    x = keras.Input((7, 9, 4))
    y = keras.layers.ReLU()(keras.layers.BatchNormalization()(keras.layers.Conv2D(4, 1)(x)))
    y = Normed(name="normed")(keras.layers.DepthwiseConv2D(3, padding="same")(y))
    return keras.Model(x, y)


def _forms(model):
    """{(twin class name, its form)} of `model`'s twins that take a form."""
    return {(type(l).__name__, getattr(l, "norm_form", None) or l.kernel_form)
            for l in model._flatten_layers()
            if hasattr(l, "norm_form") or hasattr(l, "kernel_form")}


def test_each_rewrite_gives_its_twins_its_own_forms_and_leaves_none_behind():
    """The forms of one rewrite's options are its twins' own (the subclassed block's norm
    too): a rewrite after it with the defaults makes "auto" twins, and each model's step
    traces its own batch-norm ops, the first's still unfused once the second is made."""
    stock = _twins_model()
    options = RewriteOptions(weigh=False, trace_blocks=False)  # `Normed` rebuilt, not traced
    set_ = memory.rewrite(stock, options.replace(fused_norm="false", depthwise_kernel="native"))
    default = memory.rewrite(stock, options)
    twins = ("InplaceBatchNormalization", "ReluDepthwiseConv2D")
    assert _forms(set_) == set(zip(twins, ("false", "native")))
    assert _forms(default) == set(zip(twins, ("auto", "auto")))
    assert type(default.get_layer("normed").norm).__name__ == twins[0]
    fused = {"FusedBatchNormV3", "FusedBatchNormGradV3"}
    for model, fused_ops in ((set_, False), (default, True)):
        ops = {op.type for op in training_ops(model, (2, 7, 9, 4))}
        assert fused & ops == (fused if fused_ops else set())
