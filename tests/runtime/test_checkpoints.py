"""Checkpoints: a checkpoint of another architecture is refused, naming it; runs resume
across variants and dtype policies (real checkpoints, in-process). Multi-worker resume is
tests/train/test_distributed.py's; damaged folders are test_resume.py's."""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg import memory
from tfseg.errors import InputError
from tfseg.models import deeplab_v3_plus
from tfseg.runtime import builders, checkpoints, state as state_lib
from tfseg.training import optim
from tfseg.config import Config
from tfseg.training.losses import PixelLoss
from tfseg.training.step import make_train_step


def _model(middle_repeats=1, width=0.25, classes=3):
    return deeplab_v3_plus(classes, width_multiplier=width, middle_repeats=middle_repeats,
                           dropout=0.0)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(path, model) of a checkpoint of a 1-middle-unit, width-0.25, 3-class model."""
    model = _model()
    directory = str(tmp_path_factory.mktemp("ckpt"))
    return checkpoints.Checkpoints(model, directory).save(7), model


def test_the_same_architecture_restores_exactly(saved):
    path, model = saved
    twin = _model()
    assert checkpoints.Checkpoints(twin, "/nonexistent").restore(path) == path
    for a, b in zip(model.weights, twin.weights):
        assert a.path == b.path and bool(tf.reduce_all(a == b)), a.path


@pytest.mark.parametrize("other,expected", [
    (dict(middle_repeats=2), r"entries missing \(e\.g\. weights/middle_unit2_"),
    (dict(width=0.5), r"of another shape, checkpoint vs model \(e\.g\. weights/entry_conv1/kernel"),
    (dict(classes=5), r"of another shape.*weights/logits/"),
])
def test_another_architecture_is_refused_naming_the_checkpoint(saved, other, expected):
    path, _ = saved
    message = f"^checkpoint {re.escape(path)} does not match"
    with pytest.raises(InputError, match=message) as error:
        checkpoints.Checkpoints(_model(**other), "/nonexistent").restore(path)
    assert len(str(error.value).splitlines()) == 1
    assert re.search(expected, str(error.value)), str(error.value)


def test_weights_the_model_lacks_are_refused(tmp_path):
    path = checkpoints.Checkpoints(_model(middle_repeats=2), str(tmp_path)).save(1)
    with pytest.raises(InputError, match=r"weights not in the model \(e\.g\. weights/middle_unit2_"):
        checkpoints.Checkpoints(_model(), "/nonexistent").restore(path)


_RUN = Config.from_flat(width_multiplier=0.25, middle_repeats=1, dropout=0.0, warmup_steps=0,
                        train_steps=10, learning_rate=0.05, momentum=0.9, weight_decay=1e-3)


class _Run:
    """A model, its optimizer and step counter as ``train`` builds them, and its checkpoints
    (``policy``: a dtype policy instead of the config's, e.g. "float64")."""

    def __init__(self, model_dir, policy=None, **changes):
        self.config = _RUN.replace(**changes)
        keras.mixed_precision.set_global_policy(policy or self.config.run.dtype_policy)
        try:
            self.model = builders.model(self.config, 3)
            self.optimizer = optim.optimizer(self.config, self.model)
        finally:
            keras.mixed_precision.set_global_policy("float32")
        self.step = tf.Variable(0, dtype=tf.int64)
        self.train_step = make_train_step(
            tf.distribute.get_strategy(), self.model, self.optimizer, PixelLoss(), self.step,
            False, *optim.l2_weight_decay(self.config, self.model))
        self.ckpts = checkpoints.Checkpoints(self.model, str(model_dir), optimizer=self.optimizer,
                                             step=self.step)

    def state(self):
        """{name: value}: weights and momentum slots by path, iterations and step."""
        tree = state_lib.optimizer_state(self.optimizer, self.model)
        tree.pop(state_lib.LOSS_SCALE, None)
        tree = dict(optimizer=tree, weights=memory.variables_by_path(self.model), step=self.step)
        return {name: np.asarray(v) for name, v in state_lib.checkpoint_keys(tree).values()}


def _batches(count):
    rng = np.random.default_rng(2)
    return [(tf.constant(rng.integers(0, 256, (2, 33, 33, 3)), tf.uint8),
             tf.constant(rng.integers(0, 3, (2, 33, 33)), tf.int32)) for _ in range(count)]


VARIANTS = [dict(), dict(memory_saving=True), dict(memory_saving=True, recompute=("middle",))]


@pytest.mark.slow  # 10-23 s: more than its share of the fast tier's 12 minutes
def test_each_momentum_slot_is_keyed_by_its_own_variable(tmp_path):
    """After one SGD step from zero momentum, a slot holds its variable's change (Keras:
    m = -lr * g; w += m), up to the rounding of w + m: a slot keyed by another variable's
    path cannot."""
    run = _Run(tmp_path, weight_decay=0.0, **VARIANTS[2])
    before = {v.path: v.numpy() for v in run.model.trainable_variables}
    run.train_step(_batches(1)[0])
    slots = state_lib.optimizer_state(run.optimizer, run.model)["momentum"]
    assert slots.keys() == before.keys()
    for variable in run.model.trainable_variables:
        np.testing.assert_allclose(slots[variable.path].numpy(),
                                   variable.numpy() - before[variable.path],
                                   rtol=0, atol=1e-6, err_msg=variable.path)


# One direction (~70 s on 2 cores): the variants order their variables differently either way.
@pytest.mark.slow
@pytest.mark.parametrize("first,second", [(0, 2)], ids=["stock-recompute"])
def test_resuming_in_another_variant_ends_where_the_unbroken_run_does(tmp_path, float64,
                                                                      first, second):
    """Two steps in one variant, a checkpoint, two more in another: every weight, slot and
    counter restores exactly by path (the variants order ``trainable_variables``
    differently, so positional slots fail here), and the run ends with the weights of an
    unbroken run in the first variant, to 1e-10 (a same-variant resume is bit for bit:
    tests/train/test_loop.py). In float64: in float32 this tiny network is chaotic (a
    1e-6 difference at step 1 is 0.1 by step 4); in float64 the variants' steps differ
    by 1e-15 and end within 1e-14 after four steps."""
    batches = _batches(4)
    # `run` goes on past its save: it is the unbroken run (a save does not change a
    # run: tests/train/test_loop.py, bit for bit through main.py).
    run = _Run(tmp_path / "run", "float64", **VARIANTS[first])
    for batch in batches[:2]:
        run.train_step(batch)
    path = run.ckpts.save(2)
    resumed = _Run(tmp_path / "run", "float64", **VARIANTS[second])
    assert resumed.ckpts.restore() == path
    saved, restored = run.state(), resumed.state()
    assert saved.keys() == restored.keys() and any("momentum" in name for name in saved)
    for name in saved:
        np.testing.assert_array_equal(restored[name], saved[name], err_msg=name)
    for batch in batches[2:]:
        resumed.train_step(batch)
        run.train_step(batch)
    assert int(resumed.step.numpy()) == 4 and int(resumed.optimizer.iterations) == 4
    unbroken, switched = run.state(), resumed.state()
    for name in unbroken:
        np.testing.assert_allclose(switched[name], unbroken[name], rtol=0, atol=1e-10,
                                   err_msg=name)


@pytest.mark.parametrize("first,second", [("float32", "mixed_float16"),
                                          ("mixed_float16", "float32")])
def test_a_run_resumes_under_another_dtype_policy(tmp_path, first, second):
    """Variables and slots are float32 under every policy, so a checkpoint carries over
    exactly; a loss scale the checkpoint lacks starts afresh, one it has is restored."""
    run = _Run(tmp_path, dtype_policy=first)
    run.optimizer.iterations.assign(2)  # the values need not come from training
    for variable in state_lib.optimizer_state(run.optimizer, run.model)["momentum"].values():
        variable.assign(tf.random.normal(variable.shape))
    if first == "mixed_float16":
        run.optimizer.dynamic_scale.assign(1024.0)
    run.ckpts.save(2)
    resumed = _Run(tmp_path, dtype_policy=second)
    resumed.ckpts.restore()
    saved = run.state()
    for name, value in resumed.state().items():
        np.testing.assert_array_equal(value, saved[name], err_msg=name)
    if second == "mixed_float16":
        assert float(resumed.optimizer.dynamic_scale) == 2.0 ** 15  # Keras' initial scale


def test_a_checkpoint_without_optimizer_state_is_refused_for_training(tmp_path):
    """A weights-only checkpoint (or one whose optimizer was saved by position) cannot
    resume training exactly: one line naming it, not a silent fresh optimizer."""
    run = _Run(tmp_path / "a")
    path = checkpoints.Checkpoints(run.model, str(tmp_path / "b")).save(1)
    with pytest.raises(InputError, match=r"entries missing \(e\.g\. (step|optimizer/)"):
        run.ckpts.restore(path)


def test_a_truncated_checkpoint_is_one_line_naming_it(tmp_path):
    run = _Run(tmp_path)
    path = run.ckpts.save(1)
    with open(path + ".index", "r+b") as f:
        f.truncate(20)
    with pytest.raises(InputError, match=f"^checkpoint {re.escape(path)} is damaged"):
        run.ckpts.restore(path)
