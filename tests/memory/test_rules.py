"""The rewrite's rules (`tfseg.memory.rules`): one registry, run in the order `ORDER`
states; a new twin is one rule, gated by its option, and two rules planning one node
fail."""

import keras
import numpy as np
import pytest

from tfseg import memory
from tfseg.memory import RewriteOptions
from tfseg.memory.plans import PASSES
from tfseg.memory.rules import ORDER, RECORDS, RULES, record, rule
from tfseg.models import deeplab_v3_plus
from tests.conftest import TINY


@pytest.fixture
def registry():
    """The registry as it was, after the test's own rules."""
    rules, records = list(RULES), dict(RECORDS)
    yield
    RULES[:] = rules
    RECORDS.clear()
    RECORDS.update(records)


class CountingReLU(keras.layers.ReLU):
    """A stand-in twin: a stock ReLU that counts its calls."""

    calls = 0

    def call(self, inputs):
        CountingReLU.calls += 1
        return super().call(inputs)


def conv_net():
    inputs = keras.Input((9, 11, 3))
    x = keras.layers.Conv2D(4, 3, name="conv1")(inputs)
    x = keras.layers.ReLU(name="relu1")(x)
    x = keras.layers.Conv2D(4, 3, name="conv2")(x)
    return keras.Model(inputs, keras.layers.ReLU(name="relu2")(x))


# Each built-in rule, in its order, and the options that turn it on (any of them; none:
# always): the conditions RewriteOptions' docstring states for each trick.
BUILT_IN = {
    "recompute_segments": (), "unpaid": (), "traced_blocks": ("trace_blocks",),
    "tuned_layers": (),
    "resized_concat_separable": ("lean_upsampling",), "separable": ("fuse_separable",),
    "shared_relus": ("fuse_relu_depthwise", "fuse_relu_conv"), "norms": ("inplace_norm",),
    "relu_concat": ("fuse_relu_conv",), "activation_max_pooling": ("fuse_relu_conv",),
    "layer_norms": ("inplace_norm",),
    "attention": ("lean_attention",), "resized_concat_conv": ("lean_upsampling",),
    "inside_blocks": (), "activation_dense": ("fuse_relu_conv",),
    "separable_layers": ("fuse_separable",),
    "upsampled_conv": ("lean_upsampling",), "activation_depthwise": ("fuse_relu_depthwise",),
    "activation_conv": ("fuse_relu_conv",), "scaled_conv": ("fuse_relu_conv",),
    "lean_dilated": ("lean_dilated",), "logits_resize": ("lean_upsampling",),
    "residual_folds": ("fold_residual",), "idle_norms": ("inplace_norm",)}


def test_each_rule_and_record_is_registered_once_in_order_under_real_options():
    assert {r.name: r.options for r in RULES} == BUILT_IN
    assert list(BUILT_IN) == [r.name for r in RULES]  # in this order
    assert tuple(r.name for r in RULES) == ORDER
    # Every option turns at least one rule on: none is a switch nothing reads.
    assert {o for r in RULES for o in r.options} == set(RewriteOptions.names())
    summary = memory.changes(deeplab_v3_plus(5, dropout=0.0, **TINY),
                             recompute=[memory.Segment("mid", "entry_block3_add",
                                                       "middle_unit1_add")])
    assert summary.records.keys() == RECORDS.keys()
    said = str(summary)
    for phrase in ("recomputing 1 blocks (mid)", "separable convs", "activation+layer pairs",
                   "norms output-only", "dilated depthwise convs lean",
                   "1 of them take in the resized concatenation before them "
                   "(decoder_conv1_depthwise)",
                   "the training loss takes the logits before logits_resize"):
        assert phrase in said
    assert "attention" not in said  # an empty record says nothing


def test_a_new_twin_is_one_rule_gated_by_its_option(registry):
    record("counted", lambda names: f"counted {len(names)} ReLUs")

    @rule("count_relus", option="lean_attention")  # outside ORDER: run last
    def count_relus(finding):
        for node in finding.open_nodes():
            if type(node.operation) is keras.layers.ReLU:
                finding.claim(node, twin=CountingReLU, record=("counted", node.operation.name))

    stock = conv_net()
    only = RewriteOptions.none().replace(lean_attention=True)
    summary = memory.changes(stock, only)
    assert summary.counted == ["relu1", "relu2"] and str(summary) == "counted 2 ReLUs"
    new = memory.rewrite(stock, only)
    assert [type(new.get_layer(n)) for n in ("relu1", "relu2")] == [CountingReLU] * 2
    images = np.random.RandomState(0).randn(2, 9, 11, 3).astype("float32")
    CountingReLU.calls = 0
    np.testing.assert_array_equal(new(images), stock(images))
    assert CountingReLU.calls == 2
    assert memory.changes(stock, RewriteOptions.none()).counted == []  # its option off
    # With every trick on, the earlier activation rule takes relu1 into conv2 first.
    assert memory.changes(stock).counted == ["relu2"]


def test_a_rule_or_record_is_refused_twice_or_under_an_unknown_option(registry):
    with pytest.raises(ValueError, match="unknown rewrite option"):
        rule("misspelt", option="lean_atention")
    with pytest.raises(ValueError, match="'norms'"):
        rule("norms")
    with pytest.raises(ValueError, match="'nowhere'"):
        rule("another", after="nowhere")
    with pytest.raises(ValueError, match="'fused'"):
        record("fused", str)
    with pytest.raises(ValueError, match="'actions'"):
        record("actions", str)  # a name Changes holds otherwise would never be read


def test_a_rule_from_outside_runs_right_after_the_rule_it_names_or_last(registry):
    for name, after in (("first", "residual_folds"), ("second", "residual_folds"),
                        ("after_first", "first"), ("last", None)):
        rule(name, after=after)(lambda finding: None)
    names = [r.name for r in RULES]
    assert names[names.index("residual_folds"):] == [
        "residual_folds", "first", "after_first", "second", "idle_norms", "last"]


def test_two_rules_planning_one_node_fail_naming_it(registry):
    @rule("passes_relu1_again")
    def passes_relu1_again(finding):
        finding.claim(finding.graph.node_of("relu1"), plan=PASSES)

    with pytest.raises(AssertionError, match="relu1"):
        memory.changes(conv_net())  # the activation rule passes it into conv2 already


def lora_separable():
    """ReLU -> depthwise -> norm -> 1x1 conv with LoRA, then ReLU -> LoRA 3x3 conv."""
    inputs = keras.Input((9, 11, 4))
    x = keras.layers.ReLU(name="relu0")(inputs)
    x = keras.layers.DepthwiseConv2D(3, padding="same", name="dw")(x)
    x = keras.layers.BatchNormalization(name="bn")(x)
    pointwise = keras.layers.Conv2D(6, 1, name="pw")
    x = keras.layers.ReLU(name="relu1")(pointwise(x))
    conv = keras.layers.Conv2D(3, 3, name="conv")
    model = keras.Model(inputs, conv(x))
    pointwise.enable_lora(2)
    conv.enable_lora(2)
    return model


def test_lora_and_quantized_convs_stay_stock_and_the_summary_says_why():
    """A twin built from a LoRA conv's config would leave out its LoRA terms (the
    separable block's backward pass failed on them): such convs keep no twin and take
    in nothing; the rest of the model is rewritten."""
    model = lora_separable()
    summary = memory.changes(model)
    assert summary.separable == [] and dict(summary.fused) == {"relu0": "dw"}
    assert ("pw", "LoRA-enabled: a twin would drop its LoRA terms") in summary.kept_stock
    assert "kept conv stock: LoRA-enabled" in str(summary)
    new = memory.rewrite(model)
    assert type(new.get_layer("pw")) is keras.layers.Conv2D and new.get_layer("pw").lora_enabled
    images = np.random.RandomState(0).randn(2, 9, 11, 4).astype("float32")
    import tensorflow as tf
    for m in (model, new):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(m(images, training=True) ** 2)
        grads = tape.gradient(loss, m.trainable_variables)
        assert all(g is not None for g in grads)
    np.testing.assert_allclose(new(images), model(images), rtol=1e-5, atol=1e-5)


def test_a_sequential_is_rewritten_and_a_subclassed_model_refused_in_one_sentence():
    sequential = keras.Sequential([keras.Input((9, 11, 3)), keras.layers.Conv2D(4, 3),
                                   keras.layers.BatchNormalization(), keras.layers.ReLU(),
                                   keras.layers.Conv2D(2, 1)])
    new = memory.rewrite(sequential)
    assert len(memory.changes(sequential).inplace) == 1
    assert sorted(w.path for w in new.weights) == sorted(w.path for w in sequential.weights)

    class Subclassed(keras.Model):
        def __init__(self):
            super().__init__(name="subclassed")
            self.conv = keras.layers.Conv2D(2, 1)

        def call(self, x):
            return self.conv(x)

    model = Subclassed()
    model(np.zeros((1, 5, 5, 3), "float32"))
    for function in (memory.rewrite, memory.changes):
        with pytest.raises(ValueError, match="subclassed: a subclassed model has no graph "
                                             "of layers .*tfseg.memory.blocks"):
            function(model)


def test_what_is_no_model_or_has_no_graph_yet_is_refused_for_what_it_is():
    """None, a file name or a bare layer raised AttributeError; an unbuilt Sequential and
    a layer were called subclassed models."""
    for value, kind in ((None, "NoneType"), ("model.keras", "str")):
        with pytest.raises(TypeError, match=f"takes a keras.Model, got {kind}$"):
            memory.rewrite(value)
    with pytest.raises(TypeError, match="got Dense dense_x: call it on a keras.Input"):
        memory.changes(keras.layers.Dense(2, name="dense_x"))
    unbuilt = keras.Sequential([keras.layers.Dense(2)], name="seq")
    with pytest.raises(ValueError, match="seq: a Sequential without an input .*keras.Input"):
        memory.rewrite(unbuilt)


def _kept_shapes(model, shape):
    """The shapes of the tensors a traced training step of `model` keeps."""
    return [kept_shape for _, kept_shape in _kept(model, shape)]


def _kept(model, shape):
    """(op type, shape) of each tensor a traced training step of `model` keeps."""
    import tensorflow as tf

    from tfseg.memory.kept import kept_tensors

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x, training=True) ** 2)
        return [loss] + tape.gradient(loss, model.trainable_variables)

    graph = step.get_concrete_function(tf.TensorSpec(shape)).graph
    tensors = [graph.get_tensor_by_name(k.tensor)
               for k in kept_tensors(graph, graph.outputs[0], set())]
    return [(t.op.type, tuple(t.shape)) for t in tensors]


@pytest.mark.slow  # 10-23 s: more than its share of the fast tier's 12 minutes
@pytest.mark.parametrize("output_stride,norm", [
    (16, "batch"), pytest.param(8, "group", marks=pytest.mark.slow)])  # 10-12 s each alone
def test_the_decoder_keeps_the_maps_before_its_resize_and_concatenation(output_stride, norm):
    """`resized_concat_separable`: the decoder's first separable conv (and its depthwise
    conv inside it) keeps the ASPP output and the low-level projection, not their
    304-channel concatenation at 1/4 size; without the option it keeps it."""
    stock = deeplab_v3_plus(5, output_stride=output_stride, norm=norm, dropout=0.0, **TINY)
    concat = tuple(stock.get_layer("decoder_concat").output.shape[1:])
    shape = (2, 97, 129, 3)
    size = (2, 25, 33, concat[-1])  # the concatenation at this input size
    lean = memory.rewrite(stock)
    plain = memory.rewrite(stock, RewriteOptions().replace(lean_upsampling=False))
    assert size in _kept_shapes(plain, shape)
    assert size not in _kept_shapes(lean, shape)
    outer = lean.get_layer("decoder_conv1_depthwise_recompute")
    inner = outer.block.get_layer("decoder_conv1_depthwise_input")
    assert outer.tail_relu and type(inner.tail) is keras.layers.DepthwiseConv2D
    x = np.random.RandomState(0).uniform(-1, 1, shape).astype("float32")
    np.testing.assert_allclose(lean(x, training=False), stock(x, training=False), atol=1e-5)


@pytest.mark.parametrize("before", ["relu", "dilated"])
def test_a_resized_concatenation_before_other_separable_convs_is_the_plain_rule(before, float64):
    """Where an activation comes before the depthwise conv, or it is dilated, the
    resized concatenation stays outside: the plain separable block takes the chain,
    and the rewrite is exact (it raised KeyError / ValueError)."""
    import tensorflow as tf

    from tfseg.layers import ResizeLike
    high, low = keras.Input((3, 4, 4)), keras.Input((9, 13, 3))
    x = keras.layers.Concatenate()([ResizeLike(name="up")([high, low]), low])
    if before == "relu":
        x = keras.layers.ReLU(name="pre")(x)
    x = keras.layers.DepthwiseConv2D(3, padding="same", dilation_rate=2 if before == "dilated"
                                     else 1, use_bias=False, name="dw")(x)
    x = keras.layers.BatchNormalization(name="dw_bn")(x)
    x = keras.layers.ReLU(name="dw_relu")(x)
    stock = keras.Model([high, low], keras.layers.Conv2D(5, 1, name="pw")(x))
    summary = memory.changes(stock)
    assert not summary.resized_concat and summary.separable == [("dw", "pw")]
    new = memory.rewrite(stock)
    rng = np.random.RandomState(0)
    xs = [tf.constant(rng.randn(2, 3, 4, 4)), tf.constant(rng.randn(2, 9, 13, 3))]
    got, want = [], []
    for model, out in ((stock, want), (new, got)):
        with tf.GradientTape() as tape:
            tape.watch(xs)
            loss = tf.reduce_sum(model(xs, training=True) ** 2)
        out += tape.gradient(loss, xs + model.trainable_variables)
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-9)


def inception_like(head):
    """Two Inception-style blocks at odd sizes, each a concatenation of conv -> norm ->
    ReLU branches. The first's is read by the second's 1x1 and 3x3 convs, average
    pool and max pool; the second's (`head="dense"`, all ReLUs) by a global pool, or
    (`head="conv"`, with the max pool as a part) by a 1x1 conv."""
    inputs = keras.Input((13, 11, 3))

    def unit(x, filters, size, name):
        x = keras.layers.Conv2D(filters, size, padding="same", use_bias=False, name=name)(x)
        x = keras.layers.BatchNormalization(scale=False, name=f"{name}_bn")(x)
        return keras.layers.Activation("relu", name=f"{name}_relu")(x)

    pool0 = keras.layers.AveragePooling2D(3, 1, "same", name="pool0")(inputs)
    x = keras.layers.Concatenate(name="mixed0")(
        [unit(inputs, 4, 1, "a1"), unit(unit(inputs, 3, 1, "b1"), 5, 3, "b2"),
         unit(pool0, 2, 1, "c1")])
    pool1 = keras.layers.AveragePooling2D(3, 1, "same", name="pool1")(x)
    parts = [unit(x, 4, 1, "d1"), unit(x, 3, 3, "e1"), unit(pool1, 2, 1, "f1")]
    if head == "dense":
        x = keras.layers.Concatenate(name="mixed1")(parts)
        x = keras.layers.GlobalAveragePooling2D(name="gap")(x)
        return keras.Model(inputs, keras.layers.Dense(3, name="head")(x))
    parts.append(keras.layers.MaxPooling2D(3, 1, "same", name="max1")(x))
    x = keras.layers.Concatenate(name="mixed1")(parts)
    return keras.Model(inputs, keras.layers.Conv2D(3, 1, name="head")(x))


@pytest.mark.parametrize("head", ["conv", "dense"])
def test_inception_blocks_keep_the_relus_inputs_not_their_concatenation(head, float64, tmp_path):
    """`relu_concat`: the readers of a concatenation of ReLUs (convs, average and max
    pools) take its parts; the traced step keeps no tensor of its shape (stock keeps
    the ReLUs' outputs and the concatenation), and the rewrite is exact. A
    concatenation with another part (a max pool's output), or read by anything else
    (a global pool), stays as it is."""
    import tensorflow as tf

    stock = inception_like(head)
    summary = memory.changes(stock)
    assert summary.relu_concat == ["mixed0"], str(summary)
    assert "1 concatenation of ReLUs taken in as parts by the convs and pools reading it" in str(
        summary)
    new = memory.rewrite(stock)
    assert [w.path for w in new.weights] == [w.path for w in stock.weights]
    shape = (2, 13, 11, 3)
    joined = (2, 13, 11, 11)  # mixed0 (pool1 and max1 keep outputs of its shape too)
    concat = [kind for kind, kept in _kept(stock, shape) if kept == joined]
    assert concat.count("ConcatV2") == 1
    assert [kind for kind, kept in _kept(new, shape) if kept == joined] == [
        kind for kind in concat if kind != "ConcatV2"]
    x = tf.constant(np.random.RandomState(0).randn(*shape))
    got, want = [], []
    for model, out in ((stock, want), (new, got)):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = model(x, training=True)
            loss = tf.reduce_sum(y * tf.cast(tf.range(y.shape[-1]) + 1, y.dtype))
        out += [y] + tape.gradient(loss, [x] + model.trainable_variables)
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-10)
    # Saved and loaded, the twins take their parts as before.
    new.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    np.testing.assert_allclose(loaded(x, training=True), got[0], rtol=1e-12, atol=1e-12)
