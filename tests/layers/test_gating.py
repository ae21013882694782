"""tfseg.layers.gating: the gate a twin's rebuild waits behind, with and without XLA."""

import numpy as np
import pytest
import tensorflow as tf

from tfseg.layers import gating


def _depends_on(op, target, data_only=False):
    """Whether `op` reaches `target` through its inputs (and control inputs)."""
    seen, stack = set(), [op]
    while stack:
        o = stack.pop()
        if o is target:
            return True
        if o in seen:
            continue
        seen.add(o)
        stack.extend(t.op for t in o.inputs)
        if not data_only:
            stack.extend(o.control_inputs)
    return False


@pytest.mark.parametrize("xla", [False, True], ids=["tf", "xla"])
@pytest.mark.parametrize("vector", [False, True], ids=["tensor", "vector"])
def test_the_gated_tensor_waits_for_the_gradient_by_data_under_xla(xla, vector):
    found = {}

    @tf.function(jit_compile=xla)
    def f(x, dy, v):
        out = gating.gated(x, dy, v if vector else None)
        t, w = out if vector else (out, None)
        found.update(t=t, w=w, dy=dy)
        return t * 2.0 if w is None else t * w

    x, dy, v = tf.constant([1.0, -2.0]), tf.constant([3.0, 4.0]), tf.constant([5.0, 6.0])
    got = f(x, dy, v)
    np.testing.assert_array_equal(got.numpy(), (x * (v if vector else 2.0)).numpy())
    dy_op = found["dy"].op
    gate = found["w"] if vector else found["t"]
    assert _depends_on(found["t"].op, dy_op)  # a control dependency at least
    # XLA drops control dependencies: there, and only there, the gradient is a data input.
    assert _depends_on(gate.op, dy_op, data_only=True) == xla


def test_a_list_of_gradients_is_waited_for_and_an_empty_one_gates_too():
    @tf.function(jit_compile=True)
    def f(x, a, b):
        return gating.gated(x, [a, b])

    out = f(tf.constant([1.0, 2.0]), tf.zeros([0]), tf.constant([float("nan")]))
    np.testing.assert_array_equal(out.numpy(), [1.0, 2.0])  # 0 * (no element): no NaN
    graph = f.get_concrete_function(tf.zeros([2]), tf.zeros([0]), tf.zeros([1])).graph
    x, a, b = (graph.get_operation_by_name(n) for n in ("x", "a", "b"))
    gated = graph.outputs[0].op
    assert _depends_on(gated, a) and _depends_on(gated, b)  # waits for every one
    assert _depends_on(gated, a, data_only=True)  # the first carries the data input
    assert not _depends_on(gated, b, data_only=True)


@pytest.mark.parametrize("always_data", [False, True])
def test_always_data_adds_the_data_dependency_without_xla_too(always_data):
    @tf.function
    def f(x, dy):
        return gating.gated(x, [dy], always_data=always_data)

    graph = f.get_concrete_function(tf.zeros([2]), tf.zeros([2])).graph
    dy = graph.get_operation_by_name("dy")
    assert _depends_on(graph.outputs[0].op, dy, data_only=True) == always_data


def test_the_gamma_guard_keeps_gamma_away_from_zero_with_its_sign():
    gamma = tf.constant([0.0, 1e-6, -1e-6, 0.5, -2.0])
    np.testing.assert_allclose(gating.guard_gamma(gamma, 1e-4).numpy(),
                               [1e-4, 1e-4, -1e-4, 0.5, -2.0])


@pytest.mark.parametrize("relu", [False, True])
def test_a_residual_folded_into_the_norm_is_rebuilt_and_gets_its_gradient(relu):
    y = tf.constant([[1.0, -1.5]], tf.float64)
    r = tf.constant([[-0.5, 2.0]], tf.float64)
    out, rebuild = gating.plus_residual(y, [r], relu)
    np.testing.assert_allclose(out.numpy(), (y + (tf.nn.relu(r) if relu else r)).numpy())
    np.testing.assert_allclose(rebuild(out).numpy(), y.numpy())
    dz = tf.constant([[3.0, 4.0]], tf.float64)
    (grad,) = gating.residual_grad(dz, [r], relu)
    np.testing.assert_array_equal(grad.numpy(), [[0.0, 4.0]] if relu else dz.numpy())
    assert gating.residual_grad(dz, []) == []
    assert gating.stat_dtype(tf.bfloat16) == tf.float32
    assert gating.stat_dtype(tf.float64) == tf.float64
