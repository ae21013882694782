import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.layers import GAMMA_EPSILON, InplaceBatchNormalization, InplaceGroupNormalization
from tests.layers.twins import compare, train_step


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("shape", [(2, 9, 11, 16), (3, 5, 7, 8), (1, 13, 1, 4)])
def test_batch_norm_twin_matches_stock(shape, compiled):
    compare(keras.layers.BatchNormalization(momentum=0.9), InplaceBatchNormalization(momentum=0.9),
            shape, compiled)


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


@pytest.mark.slow
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
