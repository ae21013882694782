import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.layers import GAMMA_EPSILON, InplaceBatchNormalization, InplaceGroupNormalization
from tfseg.layers import fused_norm
from tfseg.layers.fused_norm import FUSED_MIN_EPSILON
from tests.layers.twins import ancestors, compare, train_step, training_ops


FUSED_OPS = {"FusedBatchNormV3", "FusedBatchNormGradV3"}
# FUSED_MIN_EPSILON takes the fused kernels; research/deeplab's head epsilon does not.
EPSILONS = {"fused": 1e-3, "unfused": 1e-5}


def step_op_types(layer, x):
    """The op types of `layer`'s traced training step, forward and backward."""
    return {op.type for op in training_ops(layer, x.shape, x.dtype)}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("shape", [(2, 9, 11, 16), (3, 5, 7, 8), (1, 13, 1, 4)])
@pytest.mark.parametrize("path", ["fused", "unfused"])
def test_batch_norm_twin_matches_stock(shape, compiled, path):
    # Output, input and gamma/beta gradients, moving mean and (biased) variance: the
    # fused kernels' unbiased batch variance is converted back. Measured worst: 2e-7
    # of each tensor's largest value (8e-7 for dbeta, summed in another order).
    kwargs = dict(momentum=0.9, epsilon=EPSILONS[path])
    twin = InplaceBatchNormalization(**kwargs)
    compare(keras.layers.BatchNormalization(**kwargs), twin, shape, compiled,
            rtol=1e-5, atol=2e-6)
    ops = step_op_types(twin, tf.zeros(shape))
    assert FUSED_OPS <= ops if path == "fused" else not FUSED_OPS & ops
    assert FUSED_MIN_EPSILON <= EPSILONS["fused"] and EPSILONS["unfused"] < FUSED_MIN_EPSILON


@pytest.mark.parametrize("path", ["fused", "unfused"])
def test_batch_norm_twin_matches_stock_under_xla(path):
    """XLA compiles both paths (the fused kernels by tf2xla's own lowering) to the
    stock layer's outputs, gradients and moving statistics."""
    rng = np.random.RandomState(3)
    shape = (2, 9, 11, 16)
    x = tf.constant(rng.randn(*shape).astype("float32") * 2 + 0.5)
    upstream = tf.constant(rng.randn(*shape).astype("float32"))
    gamma, beta = rng.randn(2, 16).astype("float32")
    got = []
    for cls in (keras.layers.BatchNormalization, InplaceBatchNormalization):
        layer = cls(momentum=0.9, epsilon=EPSILONS[path])
        layer.build(shape)
        layer.gamma.assign(gamma), layer.beta.assign(beta)

        @tf.function(jit_compile=True)
        def step(layer=layer):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = layer(x, training=True)
                loss = tf.reduce_sum(y * upstream)
            return [y] + tape.gradient(loss, [x] + layer.trainable_weights)

        got.append([v.numpy() for v in step()] + [v.numpy() for v in layer.non_trainable_weights])
    for name, a, b in zip(["y", "dx", "dgamma", "dbeta", "moving mean", "moving variance"], *got):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=2e-6 * np.abs(a).max(), err_msg=name)


@pytest.mark.parametrize("jit_compile", [True, False], ids=["xla", "tf"])
def test_fused_rebuild_waits_for_the_gradient_by_a_data_edge_under_xla_only(jit_compile):
    """XLA drops control dependencies: there the x the gradient kernel gets must
    depend on the incoming gradient through data edges, or XLA may rebuild it in the
    forward pass and keep it (the memory the twin exists to save). TF's executor
    keeps control dependencies, so there the gate is one, and no data edge costs an
    add (and, on a full-size tensor, a copy alive during the rebuild)."""
    layer = InplaceBatchNormalization()
    shape = (2, 5, 6, 4)
    layer.build(shape)

    @tf.function(jit_compile=jit_compile)
    def step(x, upstream):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
        return tape.gradient(y, x, output_gradients=upstream)

    spec = tf.TensorSpec(shape, tf.float32)
    graph = step.get_concrete_function(spec, spec).graph
    (grad_op,) = [op for op in graph.get_operations() if op.type == "FusedBatchNormGradV3"]
    upstream = graph.inputs[1].op

    x = grad_op.inputs[1].op
    assert (upstream in ancestors(x, control=False)) is jit_compile
    assert upstream in ancestors(x, control=True)


@pytest.mark.parametrize("case", ["float64", "rank 3", "synchronized"])
def test_batch_norm_twin_without_the_fused_kernels_matches_stock(case):
    """The fused kernels take neither float64 nor a cross-replica mean: these keep
    the unfused path, still output-only."""
    shape, kwargs, dtype = (2, 9, 11, 16), {}, "float32"
    if case == "float64":
        kwargs, dtype = dict(dtype="float64"), "float64"
    elif case == "rank 3":
        shape = (3, 7, 8)
    else:
        kwargs = dict(synchronized=True)
    twin = InplaceBatchNormalization(**kwargs)
    compare(keras.layers.BatchNormalization(**kwargs), twin, shape, compiled=True, dtype=dtype,
            rtol=1e-5, atol=2e-6)
    assert not FUSED_OPS & step_op_types(twin, tf.zeros(shape, dtype))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("groups,shape", [(4, (2, 9, 11, 16)), (1, (2, 5, 7, 6)), (3, (1, 7, 5, 9))])
def test_group_norm_twin_matches_stock(groups, shape, compiled):
    compare(keras.layers.GroupNormalization(groups=groups),
            InplaceGroupNormalization(groups=groups), shape, compiled)


@pytest.mark.parametrize("kind", ["batch", "group"])
def test_twins_without_scale_or_center(kind):
    for kwargs in (dict(scale=False), dict(center=False)):
        if kind == "batch":
            pair = keras.layers.BatchNormalization(**kwargs), InplaceBatchNormalization(**kwargs)
        else:
            pair = (keras.layers.GroupNormalization(groups=2, **kwargs),
                    InplaceGroupNormalization(groups=2, **kwargs))
        compare(*pair, (2, 6, 5, 4), compiled=True)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("beta", [0.0, 0.6])
@pytest.mark.parametrize("cls", [InplaceBatchNormalization, InplaceGroupNormalization])
@pytest.mark.parametrize("gamma", [0.0, 1e-8, -1e-8])
def test_gamma_near_zero_stays_finite_and_close(cls, gamma, beta, compiled):
    layer = cls(groups=2) if cls is InplaceGroupNormalization else cls()
    stock = (keras.layers.GroupNormalization(groups=2) if cls is InplaceGroupNormalization
             else keras.layers.BatchNormalization())
    rng = np.random.RandomState(0)
    x = tf.constant(rng.randn(2, 6, 5, 4).astype("float32"))
    for l in (layer, stock):
        l.build(x.shape)
        l.gamma.assign(np.full([4], gamma, "float32"))
        l.beta.assign(np.full([4], beta, "float32"))
    upstream = tf.constant(rng.randn(2, 6, 5, 4).astype("float32"))
    y, dx, dgamma, dbeta = train_step(layer, x, upstream, compiled)
    ys, dxs, dgammas, dbetas = train_step(stock, x, upstream, compiled)
    for value in (y, dx, dgamma, dbeta):
        assert np.isfinite(value.numpy()).all()
    # The guard changes the output by at most gamma_epsilon * |x_hat|.
    np.testing.assert_allclose(y.numpy(), ys.numpy(), atol=GAMMA_EPSILON * 5)
    # gamma still learns: its gradient is the stock one (sum of dy * x_hat) up to the
    # rebuild's error, ulp(|y|) / gamma_epsilon per element (the module docstring).
    per_element = np.spacing(np.float32(abs(beta) + 1)) / GAMMA_EPSILON
    summed = np.abs(upstream.numpy()).sum((0, 1, 2))
    np.testing.assert_allclose(dgamma.numpy(), dgammas.numpy(), rtol=1e-3,
                               atol=1e-3 + float(summed.max()) * per_element)
    np.testing.assert_allclose(dbeta.numpy(), dbetas.numpy(), rtol=1e-5, atol=1e-5)


def test_batch_norm_twin_under_mixed_bfloat16(mixed_bfloat16):
    # y is stored in bfloat16, so x_hat is rebuilt from a rounded y: ~3 significant digits.
    stock_out, twin_out = compare(
        keras.layers.BatchNormalization(), InplaceBatchNormalization(), (2, 9, 11, 16),
        compiled=True, dtype="bfloat16", rtol=3e-2, atol=3e-2)
    assert twin_out[0].dtype == tf.bfloat16
    assert FUSED_OPS <= step_op_types(InplaceBatchNormalization(), tf.zeros((2, 9, 11, 16), "bfloat16"))


def test_batch_norm_twin_under_mixed_float16():
    # The fused kernels take float16 x; y is stored in float16 (~3 significant digits).
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        twin = InplaceBatchNormalization()
        compare(keras.layers.BatchNormalization(), twin, (2, 9, 11, 16), compiled=True,
                dtype="float16", rtol=1e-2, atol=1e-2)
        assert FUSED_OPS <= step_op_types(twin, tf.zeros((2, 9, 11, 16), "float16"))
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_group_norm_twin_under_mixed_bfloat16(mixed_bfloat16):
    compare(keras.layers.GroupNormalization(groups=4), InplaceGroupNormalization(groups=4),
            (2, 9, 11, 16), compiled=True, dtype="bfloat16", rtol=3e-2, atol=3e-2)


def test_inference_and_frozen_layers_run_the_stock_code():
    stock, twin = keras.layers.BatchNormalization(), InplaceBatchNormalization()
    x = tf.constant(np.random.RandomState(0).randn(2, 4, 4, 3).astype("float32"))
    stock.build(x.shape), twin.build(x.shape)
    stock.moving_mean.assign([1.0, -1.0, 0.5])
    twin.set_weights(stock.get_weights())
    np.testing.assert_array_equal(twin(x, training=False), stock(x, training=False))
    twin.trainable = stock.trainable = False
    np.testing.assert_array_equal(twin(x, training=True), stock(x, training=True))
    np.testing.assert_array_equal(twin.moving_mean.numpy(), [1.0, -1.0, 0.5])


def test_property_many_random_shapes():
    rng = np.random.RandomState(7)
    for trial in range(12):
        channels = int(rng.choice([1, 3, 8, 12]))
        shape = (int(rng.randint(1, 4)), int(rng.randint(1, 12)), int(rng.randint(1, 12)), channels)
        if shape[0] * shape[1] * shape[2] < 2:
            continue
        compare(keras.layers.BatchNormalization(), InplaceBatchNormalization(), shape,
                compiled=bool(trial % 2), seed=trial)
        groups = int(rng.choice([g for g in (1, 2, 3, 4) if channels % g == 0]))
        compare(keras.layers.GroupNormalization(groups=groups),
                InplaceGroupNormalization(groups=groups), shape, compiled=bool(trial % 2), seed=trial)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("relu", [False, True], ids=["plain", "relu"])
@pytest.mark.parametrize("kind", ["batch_fused", "batch_unfused", "group"])
def test_twins_add_a_residual_as_a_following_add_does(kind, relu, compiled):
    """norm(x, residual=r) == Add()([norm(x), r]): outputs, gradients of x, r, gamma
    and beta, moving statistics. The twin rebuilds y as the sum minus r. With
    `residual_relu`, the same for Add()([norm(x), relu(r)]) (ResNet's identity
    blocks: the block output, a ReLU, feeds the next add)."""
    shape = (2, 9, 11, 8)
    if kind == "group":
        stock, twin = keras.layers.GroupNormalization(4), InplaceGroupNormalization(4)
    else:
        epsilon = EPSILONS[kind.split("_")[1]]
        stock = keras.layers.BatchNormalization(epsilon=epsilon)
        twin = InplaceBatchNormalization(epsilon=epsilon)
    rng = np.random.RandomState(0)
    x, r, upstream = (tf.constant(rng.randn(*shape).astype("float32")) for _ in range(3))
    for layer in (stock, twin):
        layer.build(shape)
    for w in stock.trainable_weights:
        w.assign(w.numpy() + rng.randn(*w.shape).astype("float32") * 0.5)
    twin.set_weights(stock.get_weights())

    def step(layer, call):
        def run():
            with tf.GradientTape() as tape:
                tape.watch([x, r])
                z = call(layer)
                loss = tf.reduce_sum(z * upstream)
            return [z] + tape.gradient(loss, [x, r] + layer.trainable_weights)
        return (tf.function(run) if compiled else run)()

    act = tf.nn.relu if relu else tf.identity
    got = step(stock, lambda layer: keras.layers.Add()([layer(x, training=True), act(r)]))
    want = step(twin, lambda layer: layer(x, training=True, residual=r, residual_relu=relu))
    for a, b in zip(got, want):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-4, atol=1e-4)
    for a, b in zip(stock.non_trainable_weights, twin.non_trainable_weights):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-6, atol=1e-7)
    if kind == "batch_fused" and compiled:
        assert FUSED_OPS <= step_op_types(twin, x)


@pytest.mark.parametrize("norm_form", ["auto", "true", "false"])
def test_fused_norm_option_picks_the_form_and_each_matches_stock(norm_form):
    """--fused_norm (the twin's `norm_form`): "true" and "auto" (the CPU's measured choice)
    run the fused kernels, "false" the unfused ops; both match stock, to float32's rounding
    where the kernels run and exactly in float64 (which the kernels do not take: unfused
    either way)."""
    shape = (2, 9, 11, 16)
    kwargs = dict(momentum=0.9, epsilon=EPSILONS["fused"], norm_form=norm_form)
    twin = InplaceBatchNormalization(**kwargs)
    stock = dict(momentum=0.9, epsilon=EPSILONS["fused"])
    compare(keras.layers.BatchNormalization(**stock), twin, shape, compiled=True,
            rtol=1e-5, atol=2e-6)
    ops = step_op_types(twin, tf.zeros(shape))
    assert (FUSED_OPS <= ops) if norm_form != "false" else not FUSED_OPS & ops
    twin = InplaceBatchNormalization(**kwargs, dtype="float64")
    compare(keras.layers.BatchNormalization(**stock, dtype="float64"), twin, shape,
            compiled=True, dtype="float64", rtol=1e-12, atol=1e-12)
    assert not FUSED_OPS & step_op_types(twin, tf.zeros(shape, "float64"))
    with pytest.raises(ValueError, match="fused norm form"):
        InplaceBatchNormalization(norm_form="maybe")


def test_each_twin_traces_its_own_form_and_a_saved_model_keeps_it(tmp_path):
    """Twins of other forms in one process each trace their own ops, whichever was made
    or traced last: the form is the layer's, in its config, and a saved model reloads
    with it. A config saved before the form was a setting (no key) reads "auto"."""
    shape = (2, 5, 7, 8)
    unfused, fused = (InplaceBatchNormalization(norm_form=f) for f in ("false", "true"))
    default = InplaceBatchNormalization()
    for twin, fused_ops in ((unfused, False), (fused, True), (default, True), (unfused, False)):
        assert (FUSED_OPS <= step_op_types(twin, tf.zeros(shape))) == fused_ops, twin.norm_form
    config = unfused.get_config()
    assert InplaceBatchNormalization.from_config(config).norm_form == "false"
    del config["norm_form"]
    assert InplaceBatchNormalization.from_config(config).norm_form == "auto"
    model = keras.Sequential([keras.Input(shape[1:]),
                              InplaceBatchNormalization(norm_form="false", name="norm")])
    model.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras").get_layer("norm")
    assert type(loaded) is InplaceBatchNormalization and loaded.norm_form == "false"
    assert not FUSED_OPS & step_op_types(loaded, tf.zeros(shape))


@pytest.mark.parametrize("count", [tf.constant, float], ids=["dynamic", "static"])
@pytest.mark.parametrize("unbiased", [float("nan"), float("inf"), 0.0])
def test_a_single_value_per_channel_has_variance_zero_whatever_the_kernel_returns(unbiased,
                                                                                   count):
    # cuDNN's unbiased variance of one value per channel (image pooling at batch 1) is
    # 0 * 1 / 0; the CPU kernel's is 0. The biased variance is 0 either way, and the
    # correction of more values is still (n - 1) / n. The count is a tensor where the
    # batch's shape is dynamic, a number where it is static.
    one = fused_norm.biased_variance(tf.constant([unbiased, unbiased]), count(1.0))
    np.testing.assert_array_equal(one.numpy(), [0.0, 0.0])
    # No value at all (an empty batch): 0 too, not a negative variance.
    none = fused_norm.biased_variance(tf.constant([unbiased, unbiased]), count(0.0))
    np.testing.assert_array_equal(none.numpy(), [0.0, 0.0])
    many = fused_norm.biased_variance(tf.constant([4.0, 8.0]), count(4.0))
    np.testing.assert_allclose(many.numpy(), [3.0, 6.0])


@pytest.mark.parametrize("path", ["fused", "unfused"])
def test_batch_norm_twin_of_one_value_per_channel_matches_stock(path):
    # x - mean is 0 exactly, so dx is 0 plus rounding times 1 / sqrt(epsilon) (up to 32).
    kwargs = dict(momentum=0.9, epsilon=EPSILONS[path])
    compare(keras.layers.BatchNormalization(**kwargs), InplaceBatchNormalization(**kwargs),
            (1, 1, 1, 5), True, rtol=1e-4, atol=1e-4)
