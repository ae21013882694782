"""The measuring recipe, and a quick regression check of the memory saving on a
small stack. The full model's measurements (stock vs memory saving vs recompute,
in fresh processes) are asserted in tests/report/test_report.py."""

import json
import os

import keras
import pytest

from tfseg.config import Config
from tfseg.profile.measure import OutOfMemory, measure
from tfseg.profile.step import StepConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WIDTH, UNITS = 64, 4


def separable_stack(config):
    """A stem conv, then BN -> ReLU -> DepthwiseConv2D -> BN -> 1x1 Conv2D units
    (the pattern the twins target), then logits. At 128x128, batch 2, each
    activation is 8 MiB."""
    images = keras.Input((config.height, config.width, 3))
    x = keras.layers.Conv2D(WIDTH, 3, padding="same", use_bias=False)(images)
    for _ in range(UNITS):
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
        x = keras.layers.DepthwiseConv2D(3, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.Conv2D(WIDTH, 1, use_bias=False)(x)
    return keras.Model(images, keras.layers.Conv2D(config.num_classes, 1)(x))


def single_layer_twins(config):
    """`separable_stack` with each layer replaced by its own twin (no separable
    fusion): output-only norms, ReLU fused into the depthwise conv. Measured as
    "stock" (it is rewritten already)."""
    from tfseg.memory import RewriteOptions, rewrite

    return rewrite(separable_stack(config), RewriteOptions(fuse_separable=False))


SMALL = StepConfig.of(builder=(__name__, "separable_stack"), height=128, width=128, batch=2,
                      num_classes=5, timed_steps=0)


@pytest.mark.slow
@pytest.mark.xdist_group("measure")
def test_rewrite_lowers_the_measured_peak_of_a_separable_stack(monkeypatch):
    monkeypatch.chdir(ROOT)  # the measuring process imports this module by name
    stock = measure(SMALL)
    saving = measure(SMALL.replace(variant="memory_saving"))
    assert saving["parameters"] == stock["parameters"]
    # The training step's optimisation ran (the defaults of --mode=train): momentum SGD,
    # L2 on the stem, 1x1 and logits kernels (not the depthwise ones), the update applied.
    expected = {"class": "SGD", "inner_class": "SGD", "momentum": 0.9,
                "decoupled_weight_decay": 0.0, "l2_weight_decay": 4e-5,
                "l2_kernels": UNITS + 2,
                "momentum_slots": len(separable_stack(SMALL).trainable_variables)}
    assert stock["optimizer"] == expected
    assert stock["finite_by_step"] == [True]
    # Measured on 2 CPU cores: stock 145-160 MiB, rewritten 80-104 MiB, a ratio of
    # 0.55-0.72 from run to run (the allocator's layout after the warm-up varies).
    ratio = saving["peak_over_base_bytes"] / stock["peak_over_base_bytes"]
    assert ratio < 0.8, (ratio, stock["peak_over_base_bytes"], saving["peak_over_base_bytes"])
    # The single-layer twins alone, whose gates (recompute only once the gradient has
    # arrived) the separable fusion above does not use.
    twins = measure(SMALL.replace(builder=(__name__, "single_layer_twins")))
    ratio = twins["peak_over_base_bytes"] / stock["peak_over_base_bytes"]
    assert ratio < 0.85, (ratio, stock["peak_over_base_bytes"], twins["peak_over_base_bytes"])


@pytest.mark.full  # run with -m full: .ci/run keeps to 40 minutes
@pytest.mark.xdist_group("measure")
def test_the_saving_survives_xla(monkeypatch):
    """XLA drops control dependencies: without a data dependency on the gradient it
    ran every rebuild in the forward pass (measured: 256 MiB, the same as stock)."""
    monkeypatch.chdir(ROOT)
    stock = measure(SMALL.replace(jit_compile=True))
    saving = measure(SMALL.replace(variant="memory_saving", jit_compile=True))
    # Measured: stock 256 MiB, rewritten 128 MiB.
    ratio = saving["peak_over_base_bytes"] / stock["peak_over_base_bytes"]
    assert ratio < 0.7, (ratio, stock["peak_over_base_bytes"], saving["peak_over_base_bytes"])


@pytest.mark.slow
@pytest.mark.xdist_group("measure")
def test_the_measured_step_is_the_training_step_of_its_settings(monkeypatch):
    """mixed_float16 trains with a LossScaleOptimizer and decoupled decay lives in
    the optimizer (no L2 term): the measuring process builds the step as
    `tfseg.training` does, from the same settings."""
    monkeypatch.chdir(ROOT)
    config = SMALL.replace(height=32, width=32, batch=1, dtype_policy="mixed_float16",
                           weight_decay_type="decoupled", weight_decay=1e-4, momentum=0.5,
                           class_weights=(1.0, 2.0, 1.0, 1.0, 0.5))
    result = measure(config.replace(analyze=True))
    assert result["optimizer"] == {
        "class": "LossScaleOptimizer", "inner_class": "SGD", "momentum": 0.5,
        "decoupled_weight_decay": 1e-4, "l2_weight_decay": 0.0, "l2_kernels": 0,
        "momentum_slots": len(separable_stack(SMALL).trainable_variables)}
    assert result["class_weights"] == [1.0, 2.0, 1.0, 1.0, 0.5]
    # And it computes in float16: the tensors the same step keeps for its backward pass
    # in float32 take more bytes. (Not the allocator's peak: on the CPU, oneDNN's float16
    # kernels add scratch buffers of their own, 35-51 MB against float32's 5 MB peak with
    # the wheels of 2026-11-26.)
    full = measure(config.replace(dtype_policy="float32", analyze=True))
    kept = result["analysis"]["kept_bytes"], full["analysis"]["kept_bytes"]
    assert 32 * 32 * WIDTH * 2 <= kept[0] < 0.8 * kept[1], kept


def test_a_step_config_carries_a_runs_training_settings():
    run = Config.from_flat(crop_size=(65, 97), batch_size=3, dtype_policy="mixed_bfloat16",
                           strategy="one_device", jit_compile=True, momentum=0.8,
                           weight_decay=1e-4, weight_decay_type="decoupled", learning_rate=0.01,
                           dropout=0.2, class_weights=(1.0, 2.0, 3.0), recompute=("middle",))
    step = StepConfig(run=run, num_classes=3, variant="recompute", recompute_blocks=("middle",))
    assert (step.height, step.width, step.batch) == (65, 97, 3)
    back = step.run_config()
    assert (back.optim, back.run, back.data) == (run.optim, run.run, run.data)
    assert back.model == run.model.__class__(**{**vars(run.model), "memory_saving": True})
    assert not step.replace(variant="stock").run_config().model.recompute
    # What crosses to the measuring process, and what its result records.
    assert StepConfig.from_json(json.loads(json.dumps(step.to_json()))) == step
    record = step.record()
    assert (record["height"], record["batch"], record["momentum"]) == (65, 3, 0.8)
    assert record["recompute_blocks"] == ["middle"] and record["memory_saving"]
    with pytest.raises(ValueError, match="class_weights"):
        step.replace(num_classes=4)


def runs_out_of_memory(config):
    import tensorflow as tf

    raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")


def is_broken(config):
    raise ValueError("not a model")


def test_only_running_out_of_memory_reads_as_not_fitting(monkeypatch):
    """The planner counts OutOfMemory as "does not fit"; any other failure is an error."""
    monkeypatch.chdir(ROOT)
    with pytest.raises(OutOfMemory, match="OOM when allocating"):
        measure(SMALL.replace(builder=(__name__, "runs_out_of_memory")))
    with pytest.raises(RuntimeError, match="not a model") as error:
        measure(SMALL.replace(builder=(__name__, "is_broken")))
    assert not isinstance(error.value, OutOfMemory)


def test_unknown_variant_is_rejected():
    with pytest.raises(ValueError, match="variant"):
        StepConfig(variant="fast")


def test_a_builder_has_no_blocks_to_recompute():
    with pytest.raises(ValueError, match="recompute"):
        SMALL.replace(variant="recompute")


@pytest.mark.slow
@pytest.mark.xdist_group("measure")
def test_accumulated_micro_batches_take_the_memory_of_one(monkeypatch):
    """--grad_accum_steps: the measured step takes its N micro-batches (it once fed one
    batch and failed), and its peak is one micro-batch's, well under one batch of N x B."""
    monkeypatch.chdir(ROOT)
    accumulated = measure(SMALL.replace(batch=2, grad_accum_steps=2))
    whole = measure(SMALL.replace(batch=4))
    assert accumulated["grad_accum_steps"] == 2
    peak = "peak_over_base_bytes"
    assert accumulated[peak] < 0.8 * whole[peak], (accumulated[peak], whole[peak])
