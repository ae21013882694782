"""What a training step costs the host (tfseg/profile/launches.py): the ops one warm step
executes and the first step's compile time, from real steps, with and without XLA."""

import time

import keras
import pytest

from tfseg.models.blocks import block_of
from tfseg.profile import child, launches
from tfseg.profile.measure import combine, measure
from tfseg.profile.step import StepConfig, build_model, build_step


def small_stack(config):
    """Three separable units: a step of a few hundred ops that compiles in seconds."""
    images = keras.Input((config.height, config.width, 3))
    x = keras.layers.Conv2D(8, 3, padding="same", use_bias=False)(images)
    for _ in range(3):
        x = keras.layers.BatchNormalization()(keras.layers.ReLU()(x))
        x = keras.layers.SeparableConv2D(8, 3, padding="same", use_bias=False)(x)
    return keras.Model(images, keras.layers.Conv2D(config.num_classes, 1)(x))


SMALL = StepConfig.of(builder=(__name__, "small_stack"), height=33, width=49, batch=1,
                      num_classes=5, timed_steps=0)


def _first_and_warm(config, tmp_path):
    """(first step's seconds, a warm step's seconds, `Launches` of a later warm step)."""
    strategy, _, _, step = build_step(config)
    batch = child.sample_batch(config, strategy)
    seconds = []
    for _ in range(2):
        start = time.perf_counter()
        float(step(batch)[0])
        seconds.append(time.perf_counter() - start)
    return (*seconds, launches.count(lambda: float(step(batch)[0]), str(tmp_path)))


def test_a_compiled_step_runs_a_few_launches_and_its_first_step_compiles(tmp_path):
    first_off, warm_off, off = _first_and_warm(SMALL, tmp_path / "off")
    first_xla, warm_xla, xla = _first_and_warm(SMALL.replace(jit_compile="step"),
                                               tmp_path / "step")
    # Uncompiled, every op of the forward, backward and update is the executor's; the
    # whole step compiled is one launch (401 ops against 1 here, on 2 cores).
    assert off.ops_per_step > 100 and off.async_ops_per_step == 0, off
    assert 1 <= xla.ops_per_step < off.ops_per_step / 20, (off, xla)
    assert off.time_by_block == xla.time_by_block == {}  # no `tfseg.xla.Blocks` blocks
    assert launches.compile_seconds("off", first_off, warm_off) is None
    assert launches.compile_seconds("step", first_xla, warm_xla) > 0.1


def test_compile_seconds_are_the_first_steps_excess_never_below_zero():
    assert launches.compile_seconds("blocks", 47.5, 0.5) == 47.0
    assert launches.compile_seconds("step", 0.2, 0.3) == 0.0  # a noisy warm step
    assert launches.compile_seconds("off", 3.0, 0.1) is None


@pytest.mark.full  # -m full; XLA compiles the tiny network's blocks in a fresh process: ~70 s
@pytest.mark.xdist_group("measure")
@pytest.mark.timeout(600)
def test_blocks_run_far_fewer_ops_and_their_time_names_every_block():
    config = StepConfig.of(variant="memory_saving", num_classes=5, height=33, width=49,
                           batch=1, width_multiplier=0.125, middle_repeats=1, timed_steps=0,
                           launches=True)
    off = measure(config.replace(jit_compile="off"))
    blocks = measure(config.replace(jit_compile="blocks"))
    assert (off["jit_mode"], blocks["jit_mode"]) == ("off", "blocks")
    # docs/benchmarks.md: 11,546 ops against 62 on the full network.
    assert blocks["ops_per_step"] <= 80 and off["ops_per_step"] > 10 * blocks["ops_per_step"]
    assert off["compile_seconds"] is None and blocks["compile_seconds"] > 1.0
    assert off["time_by_block"] == {}
    model = build_model(config)
    expected = {block_of(layer, 1) for layer in model.layers[1:]}  # the input is no block's
    assert set(blocks["time_by_block"]) == expected, sorted(blocks["time_by_block"])
    for name, seconds in blocks["time_by_block"].items():
        assert seconds["forward"] > 0 and seconds["backward"] > 0, name


def test_repeats_keep_the_first_processes_compile_time_and_each_ones():
    """The later processes may read the first's compilations from the shared cache."""
    def run(compiled):
        return {"peak_over_base_bytes": 10, "peak_over_base_max_bytes": 12, "base_bytes": 5,
                "step_seconds": 0.5, "compile_seconds": compiled, "ops_per_step": 62}

    combined = combine([run(40.0), run(2.0), run(3.0)])
    assert combined["compile_seconds"] == 40.0 and combined["ops_per_step"] == 62
    assert combined["compile_seconds_by_process"] == [40.0, 2.0, 3.0]
    assert combine([run(None)])["compile_seconds"] is None
