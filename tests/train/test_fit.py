"""``model.compile`` + ``model.fit`` with tfseg's loss, metric and data: the loss's maths, the
metric against tfseg's evaluation, fit training a memory-saving model under XLA on the
synthetic set, fit's loss against the training step's, and the memory saving under fit."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg import data, models
from tfseg.evaluation.metrics import SegmentationMetrics
from tfseg.training import PixelLoss, mean_iou
from tfseg.training.step import make_train_step
from tests.train.conftest import ROOT

H, W = 97, 129
CLASSES = 19  # the synthetic set is read as Cityscapes


@pytest.fixture(scope="module")
def batches(tmp_path_factory):
    """Training batches (uint8 images, labels) of the synthetic set: 2 crops of 97x129."""
    root = data.write_synthetic_cityscapes(str(tmp_path_factory.mktemp("synthetic")),
                                           num_train=4, num_val=1, height=H, width=W, seed=0)
    config = data.DataConfig(dataset="cityscapes", root=root, crop_size=(H, W), batch_size=2,
                             seed=0, deterministic=True)
    return data.build_dataset(config, training=True)


def _reference(labels, logits, class_weights, sample_weight):
    """numpy, float64: sum(w * ce) / sum(w) over pixels labelled other than 255."""
    logits = logits.astype(np.float64)
    shifted = logits - logits.max(-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    keep = labels != 255
    safe = np.where(keep, labels, 0)
    ce = -np.take_along_axis(log_p, safe[..., None], -1)[..., 0]
    weights = keep * np.asarray(class_weights)[safe] * sample_weight
    return (weights * ce).sum() / weights.sum()


def test_pixel_loss_is_the_weighted_cross_entropy_over_labelled_pixels():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 3, (2, 9, 11, 4)).astype("float32")
    labels = rng.integers(0, 4, (2, 9, 11)).astype("int32")
    labels[0, :4] = 255
    labels[1, :, :3] = 255
    class_weights = (0.5, 2.0, 1.0, 3.0)
    per_pixel = rng.uniform(0.1, 2, (2, 9, 11)).astype("float32")
    loss = PixelLoss(class_weights)

    ones = np.ones(labels.shape)
    assert float(loss(labels, logits)) == pytest.approx(
        _reference(labels, logits, class_weights, ones), rel=1e-6)
    # Labels as [N, H, W, 1], as Keras pipelines often carry them: the same loss.
    assert float(loss(labels[..., None], logits)) == pytest.approx(
        _reference(labels, logits, class_weights, ones), rel=1e-6)
    assert float(loss(labels, logits, sample_weight=per_pixel)) == pytest.approx(
        _reference(labels, logits, class_weights, per_pixel), rel=1e-6)
    per_image = np.array([0.25, 4.0], "float32")
    assert float(loss(labels, logits, sample_weight=per_image)) == pytest.approx(
        _reference(labels, logits, class_weights, per_image[:, None, None] * ones), rel=1e-6)
    # The unweighted loss is the plain mean over labelled pixels.
    assert float(PixelLoss()(labels, logits)) == pytest.approx(
        _reference(labels, logits, (1.0,) * 4, ones), rel=1e-6)
    assert float(loss(np.full_like(labels, 255), logits)) == 0.0  # nothing labelled

    restored = keras.losses.deserialize(keras.losses.serialize(loss))
    assert isinstance(restored, PixelLoss) and restored.class_weights == class_weights
    assert float(restored(labels, logits)) == float(loss(labels, logits))


def test_pixel_loss_refuses_logits_smaller_than_the_labels():
    logits = tf.zeros([2, 25, 33, 3])  # a stride-4 map of 97x129 labels
    labels = tf.zeros([2, H, W], tf.int32)
    with pytest.raises(ValueError, match=r"not at the size of the labels.*\(2, 25, 33, 3\)"):
        PixelLoss()(labels, logits)

    # Sizes unknown when traced (a model of any input size): refused when it runs.
    spec = (tf.TensorSpec([None, None, None], tf.int32), tf.TensorSpec([None, None, None, 3]))
    traced = tf.function(lambda y, x: PixelLoss()(y, x), input_signature=spec)
    with pytest.raises(tf.errors.InvalidArgumentError, match="not at the size of the labels"):
        traced(labels, logits)


def _ancestors(op):
    """Every op that ``op`` waits for, through its inputs and control inputs."""
    seen, stack = set(), [op]
    while stack:
        current = stack.pop()
        for parent in [t.op for t in current.inputs] + list(current.control_inputs):
            if parent not in seen:
                seen.add(parent)
                stack.append(parent)
    return seen


def test_the_traced_size_check_runs_before_anything_reads_the_logits():
    """Else the loss's ops race the assertion, and a broadcasting error of theirs can
    come first and hide the message (seen in a busy test worker)."""
    spec = (tf.TensorSpec([None, None, None], tf.int32), tf.TensorSpec([None, None, None, 3]))
    graph = tf.function(lambda y, x: PixelLoss()(y, x)).get_concrete_function(*spec).graph
    check, = [op for op in graph.get_operations()
              if op.type == "Assert" and op.name.startswith("pixel_loss/assert_equal")]
    before = _ancestors(check) | {check}
    readers = [op for op in graph.get_operations() if op not in before
               and {t.op for t in graph.inputs} & _ancestors(op)]
    assert readers and all(check in _ancestors(op) for op in readers), \
        [op.name for op in readers if check not in _ancestors(op)][:5]


def test_mean_iou_on_logits_is_the_miou_of_tfseg_evaluation():
    rng = np.random.default_rng(1)
    metric, reference = mean_iou(5), SegmentationMetrics(5)
    for shape in [(2, 9, 11), (3, 7, 5, 1)]:  # labels [N, H, W], then [N, H, W, 1]
        labels = rng.integers(0, 4, shape)  # class 4 never labelled
        labels[rng.random(shape) < 0.3] = 255
        logits = rng.normal(size=shape[:3] + (5,)).astype("float32")
        metric.update_state(labels, logits)
        reference.update(labels.reshape(shape[:3]), logits.argmax(-1))
    np.testing.assert_array_equal(metric.total_cm.numpy(), reference.confusion)
    assert reference.confusion.sum() == reference.result()["labelled_pixels"] > 0
    assert float(metric.result()) == pytest.approx(reference.result()["miou"], rel=1e-6)


@pytest.mark.slow
@pytest.mark.timeout(600)  # over the suite's 300 s per test on a busy machine
def test_fit_trains_a_memory_saving_model_under_xla_on_the_synthetic_set(batches):
    """The Keras path end to end: ``as_fit_pairs`` of ``build_dataset``, ``compile`` with
    ``PixelLoss`` and ``mean_iou`` and ``jit_compile=True``, ``fit``: on one fixed batch the
    loss falls and the metric is reported every epoch (2-3 min on 2 busy cores: XLA compiles)."""
    fixed = batches.take(1).cache().repeat()
    images, labels = next(iter(fixed))
    x, y = next(iter(data.as_fit_pairs(fixed)))
    assert x.dtype == tf.float32 and x.shape == (2, H, W, 3)
    np.testing.assert_array_equal(x.numpy(), models.normalize(images).numpy())
    np.testing.assert_array_equal(y.numpy(), labels.numpy())
    assert (labels.numpy() == 255).any()  # the set's ignore pixels (ego vehicle, static)

    model = models.deeplab_v3_plus(CLASSES, width_multiplier=0.125, middle_repeats=1,
                                   memory_saving=True, input_shape=(H, W, 3))
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss=PixelLoss(),
                  metrics=[mean_iou(CLASSES)], jit_compile=True)
    assert model.jit_compile  # Keras would have turned it off for a model XLA cannot take
    history = model.fit(data.as_fit_pairs(fixed), epochs=12, steps_per_epoch=1,
                        verbose=0).history
    losses, mious = history["loss"], history["mean_iou"]
    assert len(losses) == len(mious) == 12 and np.isfinite(losses).all()
    assert losses[-1] < 0.6 * losses[0], losses
    assert max(losses[-3:]) < min(losses[:3]), losses
    assert all(0 <= m <= 1 for m in mious) and mious[-1] > mious[0], mious


@pytest.mark.slow
def test_the_loss_fit_reports_is_the_training_step_loss(batches):
    """``train_on_batch`` of the compiled model and tfseg's ``make_train_step`` from the same
    weights on the same synthetic batch (its ignore pixels, class weights): the loss each
    reports before its update agrees to 1e-6. No dropout: both then compute the same
    logits (batch norm in training mode uses the batch's statistics either way)."""
    images, labels = next(iter(batches))
    class_weights = tuple(np.linspace(0.5, 2.0, CLASSES))
    model = models.deeplab_v3_plus(CLASSES, width_multiplier=0.125, middle_repeats=1,
                                   dropout=0.0)
    initial = model.get_weights()

    step = tf.Variable(0, dtype=tf.int64)
    train_step = make_train_step(tf.distribute.get_strategy(), model,
                                 keras.optimizers.SGD(0.05), PixelLoss(class_weights), step)
    step_loss, finite, _ = train_step((images, labels))
    assert bool(finite) and int(step.numpy()) == 1

    model.set_weights(initial)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss=PixelLoss(class_weights))
    x, y = next(iter(data.as_fit_pairs(tf.data.Dataset.from_tensors((images, labels)))))
    fit_loss = model.train_on_batch(x, y)
    assert fit_loss == pytest.approx(float(step_loss), rel=1e-6)
    assert float(PixelLoss()(labels, model(x, training=True))) != pytest.approx(
        fit_loss, rel=1e-3)  # the class weights did count


_PEAK_SCRIPT = """
import gc, json, sys
import keras, numpy as np, tensorflow as tf
from tfseg import models
from tfseg.runtime import device
from tfseg.training import PixelLoss

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = tf.constant(rng.uniform(-1, 1, (2, 97, 129, 3)).astype("float32"))
y = rng.integers(0, 5, (2, 97, 129)).astype("int32")
y[:, :9] = 255
model = models.deeplab_v3_plus(5, width_multiplier=0.25, middle_repeats=1, dropout=0.0,
                               memory_saving=sys.argv[1] == "memory_saving",
                               input_shape=(97, 129, 3))
model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9), loss=PixelLoss(),
              jit_compile=True)
model.train_on_batch(x, y)  # warm-up: compiles, makes the slots, grows the allocator
gc.collect()
base = device.memory_info()["current"]
device.reset_peak()
model.train_on_batch(x, y)
peak = device.memory_info()["peak"]
print(json.dumps({"jit": bool(model.jit_compile), "base": base, "peak_over_base": peak - base}))
"""


@pytest.mark.full  # run with -m full: .ci/run keeps to 40 minutes
@pytest.mark.xdist_group("measure")
@pytest.mark.timeout(600)  # over the suite's 300 s per test on a busy machine
def test_a_memory_saving_model_keeps_its_saving_in_fit_under_xla():
    """One ``train_on_batch`` of ``compile(jit_compile=True)``, stock and memory saving (width
    0.25, 97x129, batch 2), each in a fresh process with oneDNN's allocator, which alone
    keeps statistics on the CPU: warm-up, gc, base = current, reset, one step, peak - base
    (``tfseg.profile.measure``'s recipe). Both processes run at once (~2-3 min).

    XLA on the CPU takes its buffers from TF's allocator, so the statistics hold, but a
    compiled step asks for few, large buffers and BFC counts the whole chunk it hands out:
    the peaks come in chunk sizes. Measured: 128 MiB stock, 32 MiB memory saving (without
    XLA: 59.7 and 8.5 MiB). ``--xla_backend_optimization_level=0`` halves the compile time;
    it sets how LLVM optimises the generated code, not XLA's buffer assignment (the same
    peaks were measured with and without it).
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_ENABLE_ONEDNN_OPTS="1",
               XLA_FLAGS="--xla_backend_optimization_level=0")
    procs = {variant: subprocess.Popen([sys.executable, "-c", _PEAK_SCRIPT, variant], cwd=ROOT,
                                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True)
             for variant in ("stock", "memory_saving")}
    results = {}
    for variant, proc in procs.items():
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-3000:]
        results[variant] = json.loads(out.strip().splitlines()[-1])
    assert all(r["jit"] and r["base"] > 0 and r["peak_over_base"] > 0 for r in results.values())
    assert results["memory_saving"]["peak_over_base"] < results["stock"]["peak_over_base"], results
