"""The loop reads the step's results only where it acts (``tfseg.training.outcomes``):
the same logged values as reading every step, and a NaN between two reads still stops
the run before anything is saved."""

import re

import numpy as np
import pytest
import tensorflow as tf

from tests.train.conftest import TINY_FLAGS, checkpoint_steps, run_main, scalars
from tfseg.training.outcomes import Outcomes


def test_outcomes_read_every_queued_step_at_once_and_follow_skipped_updates():
    outcomes = Outcomes(start=7)
    # Three queued steps: the second's update was skipped (the counter stays at 8).
    for loss, finite, after in ((1.5, True, 8), (2.5, True, 8), (0.5, True, 9)):
        outcomes.add(tf.constant(loss), tf.constant(finite), tf.constant(after, tf.int64))
    assert outcomes.ahead == 10 and outcomes.queued == 3  # never below the counter
    assert outcomes.read() == [(8, True, 1.5, True), (8, False, 2.5, True),
                               (9, True, 0.5, True)]
    assert outcomes.known == 9 and outcomes.ahead == 9 and outcomes.read() == []
    outcomes.add(tf.constant(float("nan")), tf.constant(False), tf.constant(9, tf.int64))
    (after, advanced, loss, finite), = outcomes.read()
    assert (after, advanced, finite) == (9, False, False) and np.isnan(loss)


def _losses(output):
    return {int(step): value for step, value in
            re.findall(r"step\s+(\d+)/\d+\s+\d+%\s+loss ([-+0-9.e]+|nan|inf)", output)}


@pytest.mark.slow
def test_logged_losses_are_those_of_a_run_reading_every_step(tmp_path, data_dir):
    """--log_every=1 reads every step (as the loop did before it queued steps); at
    --log_every=4 it reads every fourth: the losses logged at steps 4, 8 and 12, and
    the TensorBoard scalars, are the same."""
    runs = {}
    for every in (1, 4):
        model_dir = tmp_path / f"every{every}"
        proc = run_main("--mode=train", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
                        "--train_steps=12", "--checkpoint_every=100", "--deterministic",
                        *TINY_FLAGS, f"--log_every={every}")
        runs[every] = _losses(proc.stdout), scalars(model_dir / "train", "loss")
    (every_step, every_step_tb), (fourth, fourth_tb) = runs[1], runs[4]
    assert sorted(every_step) == list(range(1, 13)) and sorted(fourth) == [4, 8, 12]
    assert fourth == {step: every_step[step] for step in (4, 8, 12)}, runs
    assert fourth_tb == {step: every_step_tb[step] for step in (4, 8, 12)}, runs


@pytest.mark.slow
def test_a_nan_between_log_steps_stops_the_run_without_saving_it(tmp_path, data_dir):
    """At --learning_rate=300 the tiny model's gradients overflow at step 8 or 9 (reading
    every step shows it): between the reads at steps 5 and 10. The run stops at the
    read with exit 3, naming that step; the only checkpoint is step 5's, with finite
    weights."""
    proc = run_main("--mode=train", f"--data_dir={data_dir}", f"--model_dir={tmp_path}",
                    "--train_steps=12", "--checkpoint_every=5", *TINY_FLAGS, "--log_every=5",
                    "--learning_rate=300", check=False)
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    message = proc.stderr.strip().splitlines()[-1]
    bad_step = int(re.search(r"non-finite loss or gradients .* at step (\d+)", message).group(1))
    assert bad_step % 5 != 0, message  # between two reads: the case under test
    saved = checkpoint_steps(tmp_path)
    assert saved == list(range(5, bad_step, 5)) and saved, (saved, message)
    assert f"ckpt-{saved[-1]}" in message
    reader = tf.train.load_checkpoint(str(tmp_path))
    # Every float variable: the weights, the batch-norm statistics, the momentum.
    names = [name for name, _ in tf.train.list_variables(str(tmp_path))
             if name.endswith("/.ATTRIBUTES/VARIABLE_VALUE")]
    values = [reader.get_tensor(name) for name in names]
    floats = [v for v in values if np.issubdtype(np.asarray(v).dtype, np.floating)]
    assert len(floats) > 100 and all(np.isfinite(v).all() for v in floats)
