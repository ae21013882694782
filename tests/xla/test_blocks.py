"""tfseg.xla.Blocks: a functional model cut into blocks, each a tf.function (XLA-compiled,
or plain for the maths of the cut alone), against the model's own call."""

import contextlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import TINY
from tfseg.layers import Recompute
from tfseg.models import deeplab_v3_plus
from tfseg.models.blocks import block_of
from tfseg.xla import Blocks, tf_variables


def _grads(model, run, images):
    """(output, gradients of a loss of it) of `run(images)`, in one tf.function; the
    backward passes are built as the training step builds them (``compiling``)."""
    @tf.function(autograph=False)
    def step():
        with tf.GradientTape() as tape:
            y = run(images)
            loss = tf.reduce_sum(tf.cast(y, tf.float64) ** 2) / 1000
        if not isinstance(run, Blocks):
            return y, tape.gradient(loss, model.trainable_variables)
        sources = tf_variables(model.trainable_variables)
        with run.backward():
            return y, tape.gradient(loss, sources)

    y, grads = step()
    return y.numpy(), [g.numpy().astype(np.float64) for g in grads]


def _tiny(**kwargs):
    return deeplab_v3_plus(5, memory_saving=True, dropout=0.0, **TINY, **kwargs)


def _units(count=3):
    """Units of a memory-saving twin (a recomputed ReLU -> depthwise), a conv and a batch
    norm, with a residual: the blocks' kinds of layers, small enough to trace fast."""
    x = keras.Input((None, None, 8))
    y = x
    for k in range(count):
        inner = keras.Input((None, None, 8))
        dw = keras.layers.DepthwiseConv2D(3, padding="same", name=f"unit{k}_dw")(
            keras.layers.ReLU(name=f"unit{k}_relu")(inner))
        z = Recompute(keras.Model(inner, dw), name=f"unit{k}_recompute")(y)
        z = keras.layers.Conv2D(8, 1, name=f"unit{k}_conv")(z)
        z = keras.layers.BatchNormalization(name=f"unit{k}_bn")(z)
        y = keras.layers.Add(name=f"unit{k}_add")([z, y])
    return keras.Model(x, y)


@pytest.mark.parametrize("build,block_of,size", [
    (_units, lambda layer: layer.name.split("_")[0], (2, 9, 11, 8)),
    pytest.param(_tiny, block_of, (2, 49, 67, 3), marks=pytest.mark.slow)])  # 16-40 s
def test_the_cut_alone_is_exact_and_updates_the_norms_as_the_model_does(
        float64, build, block_of, size):
    """Plain tf.functions: the same ops as the model's call, so equal to 1e-12."""
    model = build()
    blocks = Blocks(model, block_of, jit_compile=False)
    if build is _tiny:
        assert blocks.names[:3] == ("entry_stem", "entry_block1", "entry_block2")
        assert blocks.names[-2:] == ("aspp", "decoder")
    else:
        assert blocks.names == ("unit0", "unit1", "unit2")
    images = tf.constant(np.random.RandomState(0).uniform(-1, 1, size))
    initial = [v.numpy() for v in model.variables]
    y_a, grads_a = _grads(model, lambda x: model(x, training=True), images)
    after_a = [v.numpy() for v in model.variables]
    for v, value in zip(model.variables, initial):
        v.assign(value)
    y_b, grads_b = _grads(model, blocks, images)
    np.testing.assert_allclose(y_b, y_a, rtol=1e-12, atol=1e-12)
    scale = max(np.abs(g).max() for g in grads_a)
    for a, b in zip(grads_a, grads_b):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12 * scale)
    if build is _units:  # one function for the three units, traced once
        assert blocks.shared() == {"unit1": "unit0", "unit2": "unit0"}
        assert [fn.experimental_get_tracing_count() for fn in blocks.functions().values()] \
            == [1]
    else:
        assert blocks.shared()["middle_unit2"] == "middle_unit1"
    moved = 0
    for v, a, before in zip(model.variables, after_a, initial):
        np.testing.assert_allclose(v.numpy(), a, rtol=1e-12, atol=1e-14, err_msg=v.path)
        moved += not v.trainable and not np.array_equal(a, before)
    assert moved  # the moving statistics were updated, inside the blocks


@pytest.mark.slow  # XLA compiles 10 blocks, forward and backward: ~40 s on 2 cores
def test_compiled_float32_gradients_are_as_close_to_float64_as_the_models_own():
    """The maths under XLA, blocks with the twins' custom gradients inside: float32
    gradients of the compiled blocks are within 2x the model's own float32 error,
    both against the model's float64 gradients."""
    keras.config.set_floatx("float64")
    try:
        reference = _tiny()
    finally:
        keras.config.set_floatx("float32")
    model = _tiny()
    for v, r in zip(model.variables, reference.variables):
        v.assign(tf.cast(r, v.dtype))
    images = np.random.RandomState(0).uniform(-1, 1, (2, 49, 67, 3))
    _, exact = _grads(reference, lambda x: reference(x, training=True), tf.constant(images))
    initial = [v.numpy() for v in model.variables]
    x32 = tf.constant(images, tf.float32)
    _, own = _grads(model, lambda x: model(x, training=True), x32)
    for v, value in zip(model.variables, initial):
        v.assign(value)
    _, compiled = _grads(model, Blocks(model, block_of), x32)

    def error(grads):
        flat = np.concatenate([g.ravel() for g in grads])
        truth = np.concatenate([g.ravel() for g in exact])
        return np.linalg.norm(flat - truth) / np.linalg.norm(truth)

    assert error(compiled) <= 2 * error(own), (error(compiled), error(own))
    assert error(own) < 1e-4


def test_a_block_that_needs_a_later_one_is_refused_naming_both():
    x = keras.Input((8, 8, 3))
    a = keras.layers.Conv2D(2, 1, name="a")(x)
    b = keras.layers.Conv2D(2, 1, name="b")(a)
    c = keras.layers.Add(name="c")([a, b])
    model = keras.Model(x, c)
    with pytest.raises(ValueError, match="block 'first' takes a tensor of block 'second'"):
        Blocks(model, lambda layer: "second" if layer.name == "b" else "first")


def test_each_layer_is_its_own_block_where_none_are_named_and_outputs_keep_their_order():
    x = keras.Input((None, None, 3))
    a = keras.layers.Conv2D(2, 1, name="a")(x)
    b = keras.layers.ReLU(name="b")(a)
    model = keras.Model(x, [b, a])
    blocks = Blocks(model, jit_compile=False)
    assert blocks.names == ("a", "b")
    images = tf.random.normal([1, 5, 7, 3])
    for got, want in zip(blocks(images), model(images)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def _two_sizes():
    """Per-layer blocks of one structure at two sizes (a ReLU, a conv with a batch norm
    before and after a stride-2 conv): they may not share a function."""
    x = keras.Input((None, None, 4))
    y = x
    for k in range(2):
        y = keras.layers.Conv2D(4, 1, name=f"pointwise{k}")(y)
        y = keras.layers.BatchNormalization(name=f"norm{k}")(y)
        y = keras.layers.ReLU(name=f"relu{k}")(y)
        if k == 0:
            y = keras.layers.Conv2D(4, 3, strides=2, name="down")(y)
    return keras.Model(x, y)


def test_blocks_alike_at_other_sizes_and_a_second_input_shape_run_their_own(float64):
    """Sharing needs the same input shapes too; a second shape traces its own."""
    model = _two_sizes()
    blocks = Blocks(model, jit_compile=False)
    for size in ((2, 9, 11, 4), (1, 13, 7, 4)):
        images = tf.constant(np.random.RandomState(0).uniform(-1, 1, size))
        initial = [v.numpy() for v in model.variables]
        y_a, grads_a = _grads(model, lambda x: model(x, training=True), images)
        for v, value in zip(model.variables, initial):
            v.assign(value)
        y_b, grads_b = _grads(model, blocks, images)
        np.testing.assert_allclose(y_b, y_a, rtol=1e-12, atol=1e-12)
        for a, b in zip(grads_a, grads_b):
            np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)
        assert blocks.shared() == {}


def _forward_outputs(blocks, model, images):
    """The 4-d outputs of each block's forward function in a traced step: what the
    forward passes keep for the backward ones."""
    @tf.function(autograph=False)
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(blocks(images) ** 2)
        sources = tf_variables(model.trainable_variables)
        with blocks.backward():
            return tape.gradient(loss, sources)

    graph = step.get_concrete_function().graph
    calls = [op for op in graph.get_operations()
             if op.type in ("PartitionedCall", "StatefulPartitionedCall")
             and "forward_block" in op.get_attr("f").name]
    assert calls
    return sum(o.shape.rank == 4 for op in calls for o in op.outputs)


def _residual_unit():
    """A separable conv's ReLU, depthwise, norm, ReLU, pointwise and norm with a residual
    add, rewritten (memory saving): a middle unit's pattern, small."""
    from tfseg import memory

    x = keras.Input((9, 11, 8))
    y = keras.layers.ReLU(name="relu")(x)
    y = keras.layers.DepthwiseConv2D(3, padding="same", name="dw")(y)
    y = keras.layers.BatchNormalization(name="dw_bn")(y)
    y = keras.layers.ReLU(name="relu2")(y)
    y = keras.layers.Conv2D(8, 1, name="pw")(y)
    y = keras.layers.BatchNormalization(name="pw_bn")(y)
    return memory.rewrite(keras.Model(x, keras.layers.Add(name="add")([x, y])))


def test_a_twins_unused_gradients_keep_nothing_alive_between_forward_and_backward(
        monkeypatch):
    """The zeros TensorFlow makes for a custom gradient's unused outputs come from static
    shapes (`zeros_from_shapes`), else each kept its input as a forward output: the
    output-only norm's input, which memory saving exists not to keep."""
    from tfseg.xla import blocks as blocks_module

    model = _residual_unit()
    images = tf.random.normal([2, 9, 11, 8])
    kept = _forward_outputs(Blocks(model, lambda layer: "one", jit_compile=False), model,
                            images)
    monkeypatch.setattr(blocks_module, "zeros_from_shapes", contextlib.nullcontext)
    without = _forward_outputs(Blocks(model, lambda layer: "one", jit_compile=False), model,
                               images)
    assert kept < without, (kept, without)


def test_each_map_a_block_keeps_for_its_backward_pass_is_kept_once(monkeypatch):
    """A norm twin's gradient refers to its output inside `tf.custom_gradient`'s
    `IdentityN`, the next layer's gradient to the wrapped one, the residual's to a
    `StopGradient` of the block's input: one value each, two forward outputs, which XLA
    keeps as two buffers. Referred to by their source (`captures_by_source`), this block
    (the rewrite makes it a recomputed ReLU-depthwise-norm-ReLU-conv and a norm with the
    residual added) keeps its input and its output: 2 maps (it kept 4)."""
    from tfseg.xla import blocks as blocks_module

    model = _residual_unit()
    images = tf.random.normal([2, 9, 11, 8])
    assert _forward_outputs(Blocks(model, lambda layer: "one"), model, images) == 2
    monkeypatch.setattr(blocks_module, "captures_by_source",
                        lambda graphs: contextlib.nullcontext())
    assert _forward_outputs(Blocks(model, lambda layer: "one"), model, images) == 4
