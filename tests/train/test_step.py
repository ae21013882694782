"""The training step: its step counter and skipped updates under loss scaling, weight decay,
and the progress bar's memory peak."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.data import cityscapes, transforms
from tfseg.errors import NonFiniteLoss
from tfseg.runtime import builders, device
from tfseg.training import optim
from tfseg.training import outcomes
from tfseg.config import Config
from tfseg.training.losses import PixelLoss
from tfseg.training.step import make_train_step
from tests.data.trees import cityscapes_tree
from tests.train.conftest import TINY_FLAGS, run_main


@pytest.fixture
def mixed_float16():
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy("float32")


def test_an_update_the_loss_scale_optimizer_skips_is_not_a_step(mixed_float16):
    config = Config.from_flat(width_multiplier=0.25, middle_repeats=1, dropout=0.0, warmup_steps=0,
                              train_steps=10, dtype_policy="mixed_float16")
    model = builders.model(config, 3)
    optimizer = optim.optimizer(config, model)
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    step = tf.Variable(0, dtype=tf.int64)
    train_step = make_train_step(tf.distribute.get_strategy(), model, optimizer, PixelLoss(),
                                 step)
    rng = np.random.default_rng(0)
    batch = (tf.constant(rng.integers(0, 256, (2, 33, 33, 3)), tf.uint8),
             tf.constant(rng.integers(0, 3, (2, 33, 33)), tf.int32))
    kernel = model.get_layer("logits").kernel
    before = kernel.numpy()

    # A loss scale of 2^100 overflows float16 gradients: the optimizer skips the update.
    optimizer.dynamic_scale.assign(2.0 ** 100)
    loss, finite, _ = train_step(batch)
    assert bool(finite) and np.isfinite(float(loss))  # the loss itself is fine
    assert int(optimizer.iterations) == 0 and int(step.numpy()) == 0
    assert float(optimizer.dynamic_scale) == 2.0 ** 99  # it did see the overflow
    np.testing.assert_array_equal(kernel.numpy(), before)

    optimizer.dynamic_scale.assign(1.0)
    train_step(batch)
    assert int(optimizer.iterations) == 1 and int(step.numpy()) == 1
    assert not np.array_equal(kernel.numpy(), before)


_PEAK_SCRIPT = """
import tensorflow as tf
from tfseg.training import progress
first = tf.fill([1024, 1024], 1.0)  # 4 MiB: the allocator has something to count
label, before = progress.memory_peak()
print(label, before)
# 1 GiB above the peak so far: a resident-size high-water mark starts at the
# parent's (it is kept across fork and exec), which may be large.
x = tf.fill([int(before) + 1024, 256, 1024], 1.0)
print(*progress.memory_peak())
del x
progress.memory_peak()  # a reading restarts the peak at what is in use then: x was, now it is not
small = tf.fill([1024, 1024], 2.0)
print(*progress.memory_peak())
"""


# The allocator measurements read (tfseg.runtime.device): a GPU's keeps statistics
# whatever oneDNN's setting; the CPU's only with oneDNN.
ALLOCATOR = f"{device.name()[:3].lower()}_peak_MiB"


@pytest.mark.xdist_group("measure")
@pytest.mark.parametrize("onednn,label", [
    ("1", ALLOCATOR), pytest.param("0", "rss_peak_MiB" if ALLOCATOR.startswith("cpu") else
                                   ALLOCATOR, marks=pytest.mark.slow)])
def test_memory_peak_reads_the_allocator_where_it_keeps_statistics(onednn, label):
    """Only oneDNN's CPU allocator keeps statistics (a GPU's always does); without it the
    progress bar falls back to the process's peak resident size, labelled as such. Either
    way a tensor larger than the peak so far raises it; the allocator's peak restarts at
    each reading."""
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=onednn, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT], capture_output=True, text=True,
                          env=env, timeout=120, check=True)
    (before_label, before), (after_label, after), (_, later) = (
        line.split() for line in proc.stdout.strip().splitlines()[-3:])
    assert before_label == after_label == label
    assert float(after) - float(before) >= 512, proc.stdout
    if label == ALLOCATOR:
        # The allocator's peak is the step's (since the last reading), not the run's;
        # the resident size's high-water mark cannot be reset.
        assert float(later) < float(after) - 512, proc.stdout


def _one_step(config, batch, initial):
    """Kernel values after one training step of ``config`` from the weights ``initial``,
    and the step's loss."""
    model = builders.model(config, 3)
    model.set_weights(initial)
    optimizer = optim.optimizer(config, model)
    step = tf.Variable(0, dtype=tf.int64)
    train_step = make_train_step(tf.distribute.get_strategy(), model, optimizer, PixelLoss(),
                                 step, False, *optim.l2_weight_decay(config, model))
    loss, _, _ = train_step(batch)
    return model, {v.path: v.numpy() for v in model.trainable_variables}, float(loss)


@pytest.mark.slow
@pytest.mark.parametrize("decay_type", ["l2", "decoupled"])
def test_weight_decay_moves_exactly_the_decayed_kernels(decay_type):
    """One step from the same weights on the same batch, with and without decay: the
    difference is ``-lr * wd * kernel`` on conv kernels and nothing on depthwise kernels,
    norms and biases. L2 (research/deeplab's) also adds ``wd / 2 * sum(kernel ** 2)`` to
    the loss, decoupled decay adds nothing."""
    lr, wd = 0.1, 0.05
    flat = dict(width_multiplier=0.25, middle_repeats=1, dropout=0.0, warmup_steps=0,
                train_steps=10, learning_rate=lr, end_learning_rate=lr, momentum=0.9,
                weight_decay_type=decay_type)
    base = Config.from_flat(**flat)
    rng = np.random.default_rng(1)
    batch = (tf.constant(rng.integers(0, 256, (2, 33, 33, 3)), tf.uint8),
             tf.constant(rng.integers(0, 3, (2, 33, 33)), tf.int32))
    initial = builders.model(base, 3).get_weights()
    model, plain, plain_loss = _one_step(Config.from_flat(**flat, weight_decay=0.0), batch,
                                         initial)
    _, decayed, decayed_loss = _one_step(Config.from_flat(**flat, weight_decay=wd), batch,
                                         initial)
    start = dict(zip((v.path for v in model.weights), initial))
    depthwise = {layer.kernel.path for layer in model._flatten_layers()
                 if isinstance(layer, keras.layers.DepthwiseConv2D)}
    assert depthwise and any(len(start[p].shape) == 4 and p not in depthwise for p in plain)
    for path in plain:
        expected = 0.0 if path in depthwise or plain[path].ndim <= 1 else (
            -lr * wd * start[path])
        np.testing.assert_allclose(decayed[path] - plain[path], expected, atol=2e-6,
                                   err_msg=path)
    penalty = 0.5 * wd * sum(float(np.sum(start[p] ** 2)) for p in plain
                             if plain[p].ndim > 1 and p not in depthwise)
    assert decayed_loss - plain_loss == pytest.approx(
        penalty if decay_type == "l2" else 0.0, rel=1e-4, abs=1e-5)


@pytest.mark.slow  # 10-23 s: more than its share of the fast tier's 12 minutes
def test_l2_decay_under_loss_scaling_moves_the_kernels_as_in_float32(mixed_float16):
    """The step adds the L2 gradient after the tape; the loss-scale optimizer unscales
    every gradient, so that one must be scaled as the loss is: the kernels still move
    by ``-lr * wd * kernel`` (unscaled, 2**15 times less)."""
    lr, wd = 0.1, 0.05
    flat = dict(width_multiplier=0.25, middle_repeats=1, dropout=0.0, warmup_steps=0,
                train_steps=10, learning_rate=lr, end_learning_rate=lr, momentum=0.9,
                weight_decay_type="l2", dtype_policy="mixed_float16")
    # Every label ignored: the data gradients are zero (a first step at the initial
    # scale, 2**15, overflows on real labels and is skipped), so only the decay moves.
    rng = np.random.default_rng(1)
    batch = (tf.constant(rng.integers(0, 256, (2, 33, 33, 3)), tf.uint8),
             tf.fill([2, 33, 33], 255))
    initial = builders.model(Config.from_flat(**flat), 3).get_weights()
    model, decayed, _ = _one_step(Config.from_flat(**flat, weight_decay=wd), batch, initial)
    start = dict(zip((v.path for v in model.weights), initial))
    kernels = [v.path for v in optim.decayed_kernels(model)]
    assert kernels
    for path in kernels:
        np.testing.assert_allclose(decayed[path] - start[path], -lr * wd * start[path],
                                   rtol=1e-3, atol=1e-7, err_msg=path)


@pytest.mark.parametrize("decay_type", ["l2", "decoupled"])
def test_l2_decay_goes_through_momentum_and_decoupled_does_not(decay_type):
    """Two steps with every label ignored, so only the decay moves the kernels
    (a = lr * wd, momentum m): L2 is a gradient, so the second step carries the first's
    velocity, w2 = w1 - a * w1 + m * (w1 - w0); decoupled decay is w2 = (1 - a) * w1.
    This is what makes L2 about 1 / (1 - m) times as strong."""
    lr, wd, m = 0.1, 0.05, 0.9
    config = Config.from_flat(width_multiplier=0.25, middle_repeats=1, dropout=0.0,
                              warmup_steps=0, train_steps=10, learning_rate=lr,
                              end_learning_rate=lr, momentum=m, weight_decay=wd,
                              weight_decay_type=decay_type)
    model = builders.model(config, 3)
    optimizer = optim.optimizer(config, model)
    train_step = make_train_step(tf.distribute.get_strategy(), model, optimizer, PixelLoss(),
                                 tf.Variable(0, dtype=tf.int64), False,
                                 *optim.l2_weight_decay(config, model))
    batch = (tf.zeros((2, 33, 33, 3), tf.uint8), tf.fill((2, 33, 33), 255))
    kernels = optim.decayed_kernels(model)
    w0 = [k.numpy() for k in kernels]
    train_step(batch)
    w1 = [k.numpy() for k in kernels]
    train_step(batch)
    a = lr * wd
    for kernel, before, after in zip(kernels, w0, w1):
        expected = after - a * after + (m * (after - before) if decay_type == "l2" else 0.0)
        np.testing.assert_allclose(kernel.numpy(), expected, rtol=0, atol=1e-6,
                                   err_msg=kernel.path)


def test_each_l2_term_is_made_after_its_kernel_gradient():
    """``wd * kernel`` needs nothing from the backward pass: without a dependency on the
    kernel's gradient TF's executor makes every one of them when the backward pass
    starts, and a scaled copy of all the kernels waits through it (157 MiB of the
    simulated peak for Xception-65 at 513x513). Each must wait for its gradient."""
    config = Config.from_flat(width_multiplier=0.25, middle_repeats=1, dropout=0.0,
                              warmup_steps=0, train_steps=10, weight_decay=1e-4,
                              weight_decay_type="l2")
    model = builders.model(config, 3)
    train_step = make_train_step(tf.distribute.get_strategy(), model,
                                 optim.optimizer(config, model), PixelLoss(),
                                 tf.Variable(0, dtype=tf.int64), False,
                                 *optim.l2_weight_decay(config, model))
    specs = ((tf.TensorSpec((2, 33, 33, 3), tf.uint8), tf.TensorSpec((2, 33, 33), tf.int32)),)
    graph = train_step.get_concrete_function(*specs).graph
    # Not the optimizer's own (its scope): the update multiplies each 4-D momentum read too.
    terms = [op for op in graph.get_operations()
             if op.type == "Mul" and len(op.outputs[0].shape) == 4
             and any(t.op.type == "ReadVariableOp" for t in op.inputs)
             and not op.name.startswith("sgd")]
    assert len(terms) == len(optim.decayed_kernels(model)) > 10

    def after_the_backward_pass_starts(op):
        seen, todo = set(), [op]
        while todo:
            node = todo.pop()
            for parent in [t.op for t in node.inputs] + list(node.control_inputs):
                if parent.name.startswith("gradient_tape"):
                    return True
                if parent.name not in seen:
                    seen.add(parent.name)
                    todo.append(parent)
        return False

    for term in terms:
        assert after_the_backward_pass_starts(term), term.name


def test_updates_skipped_in_a_row_stop_the_run(mixed_float16):
    """A step whose gradients are always NaN (the loss is finite) never advances under
    loss scaling; the loop's counter logs it and raises ``NonFiniteLoss`` (exit 3) after
    --max_skipped_updates instead of looping in silence."""
    @tf.custom_gradient
    def nan_gradient(x):
        return tf.identity(x), lambda dy: dy * float("nan")

    inputs = keras.Input((5, 7, 3))
    logits = keras.layers.Conv2D(3, 1)(inputs)
    model = keras.Model(inputs, keras.layers.Lambda(nan_gradient, dtype="float32")(logits))
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1, momentum=0.9))
    optimizer.build(model.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64)
    train_step = make_train_step(tf.distribute.get_strategy(), model, optimizer, PixelLoss(),
                                 step)
    batch = (tf.ones((2, 5, 7, 3), tf.uint8), tf.zeros((2, 5, 7), tf.int32))
    lines = []
    skipped = outcomes.SkippedUpdates(limit=12, log=lines.append)
    with pytest.raises(NonFiniteLoss, match=r"^12 updates in a row skipped .* at step 1 "
                                            r"\(--max_skipped_updates=12\).*checkpoint is ckpt-7"):
        for _ in range(100):
            loss, finite, _ = train_step(batch)
            assert bool(finite) and np.isfinite(float(loss))
            skipped(int(step.numpy()) > 0, int(step.numpy()), optimizer, "ckpt-7")
    assert int(step.numpy()) == 0 and skipped.count == 12
    assert [line.split(":")[0].strip() for line in lines] == ["step 1"] * 2  # 1st and 10th
    assert "update skipped, non-finite gradients (10 in a row" in lines[1]
    skipped(True, 1, optimizer, "ckpt-7")  # an applied update resets the count
    assert skipped.count == 0


def test_the_step_normalises_uint8_pixels_as_the_old_float_path_did(tmp_path):
    """Real crops of real files: the old pipeline fed the model ``crop / 127.5 - 1`` in
    float32, the new one feeds ``to_uint8(crop)`` and the step normalises it. On the same
    (rounded) pixels the losses agree to float32 rounding; against the unrounded crop they
    differ only through the rounding, at most 0.5 a value (0.5 / 127.5 after normalising)."""
    pairs = cityscapes_tree(tmp_path, size=(23, 31), n=2)
    source = cityscapes.source(str(tmp_path), "train")
    crops = []
    for i, (image_path, label_path) in enumerate(pairs):
        image = tf.io.decode_png(tf.io.read_file(image_path), channels=3)
        label = source.decode_label(tf.io.read_file(label_path))[0]
        crops.append(transforms.random_scale_crop(image, label, tf.constant([i, 3]), (29, 35),
                                                  (1.0, 1.6)))
    floats = tf.stack([c[0] for c in crops])  # 0-255, between whole values
    labels = tf.stack([c[1] for c in crops])
    pixels = transforms.to_uint8(floats)
    assert float(tf.reduce_max(tf.abs(tf.cast(pixels, tf.float32) - floats))) <= 0.5

    config = Config.from_flat(width_multiplier=0.25, middle_repeats=1, dropout=0.0, warmup_steps=0,
                              train_steps=10)
    model = builders.model(config, 19)
    loss_fn = PixelLoss()
    # The old step's forward pass on float32 input (BatchNorm in training mode: batch
    # statistics, so the moving averages it updates change nothing here).
    old_input = tf.cast(pixels, tf.float32) / 127.5 - 1.0
    same_pixels = float(loss_fn(labels, model(old_input, training=True)))
    unrounded = float(loss_fn(labels, model(floats / 127.5 - 1.0, training=True)))
    step = tf.Variable(0, dtype=tf.int64)
    train_step = make_train_step(tf.distribute.get_strategy(), model,
                                 optim.optimizer(config, model), loss_fn, step)
    loss, finite, _ = train_step((pixels, labels))  # the loss before the update
    assert bool(finite) and int(step.numpy()) == 1
    assert float(loss) == pytest.approx(same_pixels, rel=1e-6)
    # ~0.2% on this tiny random network, whose loss is very sensitive to its input.
    assert float(loss) == pytest.approx(unrounded, rel=1e-2)


def _accumulated_run(config, initial, batches):
    """(model, optimizer, step) after ``train_step`` on each of ``batches`` from ``initial``."""
    model = builders.model(config, 3)
    model.set_weights(initial)
    optimizer = optim.optimizer(config, model)
    step = tf.Variable(0, dtype=tf.int64)
    train_step = make_train_step(tf.distribute.get_strategy(), model, optimizer, PixelLoss(),
                                 step, False, *optim.l2_weight_decay(config, model),
                                 accum_steps=config.optim.grad_accum_steps)
    losses = [float(train_step(batch)[0]) for batch in batches]
    return model, optimizer, step, losses


@pytest.mark.slow
def test_accumulated_micro_batches_update_as_one_batch_of_them_all():
    """N=3 micro-batches of 2 with frozen batch norm and no dropout make the update of one
    batch of 6: the loss is normalised by all their labelled pixels, which differ from one
    micro-batch to the next, and L2 decay and momentum count once per update."""
    config = Config.from_flat(width_multiplier=0.125, middle_repeats=1, dropout=0.0,
                              warmup_steps=1, train_steps=10, learning_rate=0.05,
                              weight_decay=1e-2, freeze_batch_norm=True)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (2, 6, 33, 41, 3))
    labels = rng.integers(0, 3, (2, 6, 33, 41))
    labels[:, :2, :20] = 255  # the first micro-batch has far fewer labelled pixels
    labels[:, 5] = 255  # and one image none
    big = [(tf.constant(i, tf.uint8), tf.constant(l, tf.int32)) for i, l in zip(images, labels)]
    micro = [[(x[k:k + 2], y[k:k + 2]) for k in (0, 2, 4)] for x, y in big]
    initial = builders.model(config, 3).get_weights()
    one, one_opt, one_step, one_losses = _accumulated_run(config, initial, big)
    acc, acc_opt, acc_step, acc_losses = _accumulated_run(
        config.replace(grad_accum_steps=3), initial, micro)
    assert int(acc_step.numpy()) == int(acc_opt.iterations) == 2
    np.testing.assert_allclose(acc_losses, one_losses, rtol=1e-5)
    moved = False
    for a, b, w0 in zip(one.weights, acc.weights, initial):
        scale = np.abs(a.numpy() - w0).max()
        moved |= scale > 0
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-3 * scale + 1e-7,
                                   err_msg=a.path)
    assert moved


@pytest.mark.slow
def test_the_loop_reads_n_batches_per_accumulated_update(tmp_path, data_dir):
    """--grad_accum_steps=2: 2 updates read 4 batches; the checkpoint says so, for resume."""
    run_main(f"--data_dir={data_dir}", f"--model_dir={tmp_path}", "--mode=train",
             "--train_steps=2", "--checkpoint_every=2", "--grad_accum_steps=2", *TINY_FLAGS)
    reader = tf.train.load_checkpoint(str(tmp_path / "ckpt-2"))
    assert int(reader.get_tensor("batches_read/.ATTRIBUTES/VARIABLE_VALUE")) == 4
    assert int(reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE")) == 2
