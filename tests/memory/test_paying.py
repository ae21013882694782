"""tfseg.memory.paying / weigh: each trick is kept only where the traced step keeps less
with it, so no model the rewrite makes bigger; the summary names what stayed stock."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg import memory
from tfseg.memory import RewriteOptions
from tfseg.memory.kept import step_kept_bytes
from tfseg.models import deeplab_v3_plus
from tests.conftest import TINY
from tests.memory.test_rewrite import deeplab_images


def shared_input(size=(9, 7)):
    """conv -> x; x feeds a norm -> sigmoid and a conv beside it, joined. The conv keeps x
    anyway, so stock's norm (which keeps its input) adds nothing, while an output-only
    norm keeps its output, which nothing else keeps: that twin costs a map."""
    inputs = keras.Input((*size, 3))
    x = keras.layers.Conv2D(8, 3, padding="same", name="conv0")(inputs)
    a = keras.layers.Activation("sigmoid", name="act")(
        keras.layers.BatchNormalization(name="bn")(x))
    b = keras.layers.Conv2D(8, 3, padding="same", name="beside")(x)
    return keras.Model(inputs, keras.layers.Concatenate(name="join")([a, b]))


def chain(size=(9, 7)):
    """conv -> norm -> ReLU -> conv: every trick there pays (the norm's input is kept by
    no one else, and the ReLU goes into the conv)."""
    inputs = keras.Input((*size, 3))
    x = keras.layers.Conv2D(8, 3, padding="same", name="conv0")(inputs)
    x = keras.layers.ReLU(name="relu")(keras.layers.BatchNormalization(name="bn")(x))
    return keras.Model(inputs, keras.layers.Conv2D(4, 3, padding="same", name="conv1")(x))


def images(size=(9, 7), batch=2):
    return tf.constant(np.random.RandomState(0).rand(batch, *size, 3).astype("float32"))


def test_a_norm_whose_input_is_kept_anyway_stays_stock_and_the_summary_says_why():
    model, x = shared_input(), images()
    stock = step_kept_bytes(model, x)
    unweighed = memory.rewrite(model, RewriteOptions(weigh=False))
    assert step_kept_bytes(unweighed, x) > stock  # every trick, where found, grows it
    weighed = memory.weigh(model, x)
    assert not weighed.options.inplace_norm
    [(name, with_twins, without)] = weighed.options.unpaid
    assert name == "inplace_norm" and without == stock
    assert with_twins - stock >= 2 * 9 * 7 * 8 * 4  # the norm's output map, float32
    assert weighed.kept == weighed.stock == stock
    new = memory.rewrite(model, memory.paying(model, x))
    assert step_kept_bytes(new, x) == stock
    assert {type(layer) for layer in new.layers} == {type(layer) for layer in model.layers}
    summary = str(memory.changes(model, weighed.options))
    assert summary.startswith("kept stock where the twins did not pay") and "inplace_norm" in summary


def test_the_default_rewrite_never_keeps_more_than_stock(caplog):
    """Three norms read one conv's output (a NASNet cell's shape): each output-only twin
    keeps its own output where the stock norms share the one input."""
    inputs = keras.Input((9, 7, 3))
    x = keras.layers.Conv2D(8, 3, padding="same", name="conv0")(inputs)
    norms = [keras.layers.BatchNormalization(name=f"bn{i}")(x) for i in range(3)]
    model = keras.Model(inputs, keras.layers.Concatenate(name="join")(norms + [x]))
    x = images()
    stock = step_kept_bytes(model, x)
    assert step_kept_bytes(memory.rewrite(model, RewriteOptions(weigh=False)), x) > stock
    with caplog.at_level("INFO", logger="tfseg.memory"):
        new = memory.rewrite(model)
    assert step_kept_bytes(new, x) == stock
    assert [type(layer) for layer in new.layers] == [type(layer) for layer in model.layers]
    assert "kept stock where the twins did not pay" in caplog.text
    np.testing.assert_array_equal(new(x, training=True), model(x, training=True))


def test_only_a_norm_whose_input_another_layer_reads_may_keep_more():
    """The check that decides whether a rewrite is weighed (two traced steps): a norm
    beside a conv on one input may cost; a chain's, and MobileNetV2's, cannot."""
    assert memory.may_keep_more(shared_input(), memory.changes(shared_input()))
    assert not memory.may_keep_more(chain(), memory.changes(chain()))
    inner = chain()
    outer_input = keras.Input((9, 7, 3))
    outer = keras.Model(outer_input, keras.layers.Conv2D(2, 1, name="head")(inner(outer_input)))
    assert not memory.may_keep_more(outer, memory.changes(outer))
    inner = shared_input()
    outer = keras.Model(outer_input, keras.layers.Conv2D(2, 1, name="head")(inner(outer_input)))
    assert memory.may_keep_more(outer, memory.changes(outer))  # found in the nested model
    mobilenet = keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3))
    assert not memory.may_keep_more(mobilenet, memory.changes(mobilenet))


def test_a_model_with_an_open_shape_is_rewritten_unweighed_and_the_log_says_so(caplog):
    model = shared_input(size=(None, None))
    with caplog.at_level("INFO", logger="tfseg.memory"):
        new = memory.rewrite(model)
    assert "not weighed: an input's shape is open" in caplog.text
    assert type(new.get_layer("bn")) is not keras.layers.BatchNormalization


def test_where_every_trick_pays_none_is_turned_off():
    model, x = chain(), images()
    weighed = memory.weigh(model, x)
    assert weighed.options == RewriteOptions() and weighed.options.unpaid == ()
    assert weighed.kept < weighed.stock
    assert weighed.kept == step_kept_bytes(memory.rewrite(model), x)
    assert "did not pay" not in str(memory.changes(model, weighed.options))


def test_a_norm_only_a_stock_relu_reads_stays_stock_and_a_sequential_is_weighed_as_its_graph():
    """Without the ReLU taken into the conv, an output-only norm would keep its output
    where stock's keeps its input, the same bytes (the ReLU keeps its own output), with
    its statistics beside: the rewrite keeps that norm stock and says why, so weighing
    finds nothing to turn off; with the fusion (the conv keeps the norm's output too) it
    pays."""
    model = keras.Sequential([keras.Input((9, 7, 3)), keras.layers.Conv2D(8, 3, name="c0"),
                              keras.layers.BatchNormalization(name="bn"),
                              keras.layers.ReLU(name="relu"), keras.layers.Conv2D(4, 3, name="c1")])
    x = images()
    unfused = RewriteOptions(fuse_relu_conv=False)
    found = memory.changes(model, unfused)
    assert found.idle_norms == ["bn"] and found.inplace == []
    assert str(found).startswith("kept 1 norms stock: a stock ReLU reads each")
    new = memory.rewrite(model, unfused)
    assert type(new.get_layer("bn")) is keras.layers.BatchNormalization
    assert step_kept_bytes(new, x) == step_kept_bytes(model, x)
    weighed = memory.weigh(model, x, unfused)
    assert weighed.options == unfused and weighed.kept == weighed.stock
    assert memory.changes(model).idle_norms == [] and memory.changes(model).inplace == ["bn"]
    assert memory.weigh(model, x).options == RewriteOptions()


@pytest.mark.full  # -m full; nine traced DeepLab steps: ~50 s on 2 cores
def test_twins_inside_a_recomputed_block_are_kept_though_they_weigh_nothing():
    """DeepLab's ReLU-depthwise and dilated twins are inside its separable convs'
    `Recompute` blocks: the outer step keeps the same bytes without them, yet they
    shrink the blocks' second runs, so they stay on."""
    model = deeplab_v3_plus(num_classes=3, **TINY)
    weighed = memory.weigh(model, tf.constant(deeplab_images(), tf.float32))
    assert weighed.options == RewriteOptions() and weighed.kept < 0.5 * weighed.stock


@pytest.mark.full  # -m full; NASNetMobile traced a dozen times: 130-200 s on 2 cores (CI:
# test_applications' NASNet case, the default rewrite, and the three norms above)
def test_nasnet_weighed_keeps_less_than_the_default_rewrite_and_stock():
    """NASNet's cells give each input to several branches. Without the twins of its
    SeparableConv2D layers, which read the norms' outputs, its output-only norms keep
    more than they save (3,877,008 bytes kept with them, 3,848,460 without at 32x32 b2);
    weighed, the rewrite keeps 0.95x stock's against 0.96x. With those twins every trick
    pays: 1,704,800 bytes against stock's 4,045,580 (0.42x)."""
    model = keras.applications.NASNetMobile(weights=None, input_shape=(32, 32, 3), classes=5)
    x = images((32, 32))
    options = memory.RewriteOptions(fuse_separable=False, weigh=False)
    weighed = memory.weigh(model, x, options)
    assert [name for name, _, _ in weighed.options.unpaid] == ["inplace_norm"]
    assert weighed.kept < step_kept_bytes(memory.rewrite(model, options), x) < weighed.stock
    assert step_kept_bytes(memory.rewrite(model, options.replace(weigh=True)), x) == weighed.kept
    every = memory.weigh(model, x)
    assert every.options.unpaid == () and every.kept < 0.5 * every.stock
