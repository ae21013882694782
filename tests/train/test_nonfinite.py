"""The training step's guard against non-finite updates: a step whose loss or gradients are
NaN writes nothing the optimizer owns, and the select form that does it without a host
round trip updates exactly as the ``tf.cond`` it replaces."""

import json
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.config import Config
from tfseg.training import optim
from tfseg.training.losses import PixelLoss
from tfseg.training.step import make_train_step, selects
from tests.train.conftest import ROOT, main_env

CONFIG = Config.from_flat(width_multiplier=0.25, middle_repeats=1, dropout=0.0, warmup_steps=2,
                          train_steps=10, learning_rate=0.05, momentum=0.9, weight_decay=1e-3)


def _model():
    """A small conv net with batch norm (the guard does not depend on the model): 3 classes."""
    inputs = keras.Input((None, None, 3))
    x = keras.layers.Conv2D(8, 3, padding="same", use_bias=False)(inputs)
    x = keras.layers.ReLU()(keras.layers.BatchNormalization()(x))
    x = keras.layers.DepthwiseConv2D(3, padding="same")(x)
    return keras.Model(inputs, keras.layers.Conv2D(3, 1, name="logits")(x))


def _built(guard, initial, config=CONFIG):
    """(model, optimizer, step counter, train step) from the weights ``initial``."""
    model = _model()
    model.set_weights(initial)
    optimizer = optim.optimizer(config, model)
    step = tf.Variable(0, dtype=tf.int64)
    train_step = make_train_step(tf.distribute.get_strategy(), model, optimizer, PixelLoss(),
                                 step, False, *optim.l2_weight_decay(config, model),
                                 guard=guard)
    return model, optimizer, step, train_step


def _state(model, optimizer):
    """Every trainable weight, momentum slot and the iteration counter, as arrays."""
    return ([v.numpy() for v in model.trainable_variables]
            + [m.numpy() for m in optimizer.momentums] + [optimizer.iterations.numpy()])


def _batches(n, nan_at=None):
    """``n`` float 0-255 batches of 2 at 33x41 (an odd size); the ``nan_at``-th has one
    NaN pixel, as a corrupt decoded image would: through batch norm's batch statistics it
    makes the loss and every gradient NaN."""
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        images = rng.uniform(0, 255, (2, 33, 41, 3)).astype(np.float32)
        if i == nan_at:
            images[1, 7, 11, 2] = np.nan
        out.append((tf.constant(images), tf.constant(rng.integers(0, 3, (2, 33, 41)), tf.int32)))
    return out


def _bits(arrays):
    """Each array's bytes: -0.0 differs from +0.0 here, unlike in ``np.array_equal``."""
    return [np.asarray(a).tobytes() for a in arrays]


@pytest.mark.parametrize("momentum", [0.9, 0.0])
def test_finite_steps_are_bit_identical_to_the_cond_and_a_nan_step_writes_nothing(momentum):
    """Momentum 0.9 writes by assign (the slot) and assign_add (the weight), 0.0 by
    assign_sub; a weight and a slot at -0.0 before the NaN step stay -0.0."""
    config = CONFIG.replace(momentum=momentum)
    initial = _model().get_weights()
    cond_model, cond_opt, cond_step, cond_train = _built("cond", initial, config)
    model, optimizer, step, train = _built("select", initial, config)
    assert selects(optimizer, model.trainable_variables)
    assert bool(optimizer.momentums) == bool(momentum)
    # Finite steps 0, 1 (momentum from the second on, through the warm-up), then NaN, then
    # one more finite step that must continue from step 1's state.
    for i, batch in enumerate(_batches(4, nan_at=2)):
        if i == 2:
            for m in (model, cond_model):
                kernel = m.get_layer("logits").kernel
                kernel.assign(tf.tensor_scatter_nd_update(kernel, [[0, 0, 0, 0]], [-0.0]))
            for o in (optimizer, cond_opt):
                for slot in o.momentums[:1]:
                    slot.assign(-tf.zeros_like(slot))
        before = _bits(_state(model, optimizer))
        loss, finite, _ = train(batch)
        cond_loss, cond_finite, _ = cond_train(batch)
        assert bool(finite) == bool(cond_finite) == (i != 2)
        np.testing.assert_array_equal(float(loss), float(cond_loss))
        after = _bits(_state(model, optimizer))
        assert after == _bits(_state(cond_model, cond_opt))  # bit-identical, NaN step too
        if i == 2:
            assert np.isnan(float(loss)) and after == before
        else:
            assert after != before
    assert int(optimizer.iterations) == int(step.numpy()) == int(cond_step.numpy()) == 3


def _op_types(graph):
    """Op types of ``graph`` and of every function it calls (cond branches included)."""
    types = [op.type for op in graph.get_operations()]
    for function in graph._functions.values():
        types += [node.op for node in function.cached_definition.node_def]
    return types


def _after(op, check):
    """Whether ``op`` runs only after ``check``: through data or control inputs."""
    seen, todo = set(), [op]
    while todo:
        node = todo.pop()
        for parent in [t.op for t in node.inputs] + list(node.control_inputs):
            if parent is check:
                return True
            if parent.name not in seen:
                seen.add(parent.name)
                todo.append(parent)
    return False


def test_only_the_cond_form_has_a_conditional_for_the_host_to_resolve():
    """On a GPU ``If`` (and the ``Switch`` it is lowered to) takes its predicate in host
    memory: the select form has none anywhere in the step, and one select per write
    (each weight and each momentum slot) instead."""
    initial = _model().get_weights()
    specs = (tf.TensorSpec((2, 33, 41, 3), tf.uint8), tf.TensorSpec((2, 33, 41), tf.int32))
    types = {}
    for guard in ("cond", "select"):
        model, optimizer, _, train = _built(guard, initial)
        function = train.get_concrete_function(specs)  # the select form's, last
        types[guard] = _op_types(function.graph)
    # Every read the update makes waits for the check (as the cond's branch does): a
    # momentum slot read and scaled at the step's start would wait, slot-sized, through
    # the whole backward pass.
    check = function.outputs[1].op
    while check.type == "Identity":
        check = check.inputs[0].op
    reads = [op for op in function.graph.get_operations()
             if op.type == "ReadVariableOp" and op.name.startswith("sgd")]
    assert len(reads) > 2 * len(model.trainable_variables)
    for read in reads:
        assert _after(read, check), read.name
    conditionals = ("If", "StatelessIf", "Switch", "Merge")
    assert not [t for t in types["select"] if t in conditionals]
    assert [t for t in types["cond"] if t in conditionals]
    writes = len(model.trainable_variables) + len(optimizer.momentums)
    assert types["select"].count("SelectV2") - types["cond"].count("SelectV2") == writes


def test_optimizers_the_select_form_does_not_cover_keep_the_cond():
    """Decoupled weight decay writes the kernels directly: "auto" falls back to the cond
    and an explicit "select" is refused in one line."""
    config = CONFIG.replace(weight_decay_type="decoupled")
    initial = _model().get_weights()
    model, optimizer, _, _ = _built("auto", initial, config)
    assert not selects(optimizer, model.trainable_variables)
    with pytest.raises(ValueError, match="does not cover SGD"):
        _built("select", initial, config)


_MIRRORED = """
import json
import numpy as np, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from tests.train import test_nonfinite as t
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
runs, initial = {}, t._model().get_weights()
for guard in ("select", "cond"):
    with strategy.scope():
        model, optimizer, step, train = t._built(guard, initial)
    runs[guard] = []
    for batch in t._batches(4, nan_at=2):  # the NaN image is the second replica's
        (batch,) = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensors(batch))
        finite = bool(train(batch)[1])
        runs[guard].append((finite, t._state(model, optimizer) + [step.numpy()]))
same = [all(np.array_equal(a, b) for a, b in zip(x[1], y[1]))
        for x, y in zip(runs["select"], runs["cond"])]
kept = all(np.array_equal(a, b) for a, b in zip(runs["select"][1][1], runs["select"][2][1]))
print(json.dumps({"finite": [f for f, _ in runs["select"]], "same": same, "kept": kept,
                  "steps": int(runs["select"][-1][1][-1])}))
"""


@pytest.mark.slow
def test_a_nan_on_one_of_two_replicas_skips_the_update_on_both():
    """2 mirrored replicas (a fresh process: logical devices must be set before TF starts):
    one replica's NaN skips everyone's update, and every step equals the cond's."""
    proc = subprocess.run([sys.executable, "-c", _MIRRORED], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=main_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"finite": [True, True, False, True], "same": [True] * 4, "kept": True,
                      "steps": 3}
