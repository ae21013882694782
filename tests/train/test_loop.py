"""main.py --mode=train end to end: resume, SIGTERM, NaN. Signals go to real processes;
the other runs are main.py called in this process (``tests.command``)."""

import json
import os
import re
import resource
import signal
import time

import numpy as np
import pytest
import tensorflow as tf

from tests.train.conftest import (TINY_FLAGS, checkpoint_steps, restored_step, run_main,
                                  scalars, start_main, wait_for)
from tfseg.config import Config
from tfseg.runtime import builders, checkpoints
from tfseg.training import optim


def _losses(output):
    return [float(v) for v in re.findall(r"loss ([-+0-9.e]+|nan|inf)", output)]


@pytest.mark.slow
def test_train_then_resume_continues_the_step_count(tmp_path, data_dir):
    common = ("--mode=train", f"--data_dir={data_dir}", f"--model_dir={tmp_path}",
              "--checkpoint_every=2", "--keep_checkpoints=2", *TINY_FLAGS)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    first = run_main("--train_steps=4", "--eval_every=2", *common)
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    assert "from scratch" in first.stdout
    assert checkpoint_steps(tmp_path) == [2, 4]
    # --eval_every: val mIoU during training, logged and in TensorBoard at steps 2 and 4.
    evals = re.findall(r"step ([24]): val mIoU 0\.\d{4} \(whole image, 2 images", first.stdout)
    assert evals == ["2", "4"], first.stdout[-2000:]
    mious = scalars(tmp_path / "eval", "miou/whole")
    assert sorted(mious) == [2, 4] and all(0 <= v <= 1 for v in mious.values())
    # The progress bar's memory peak, labelled with where it comes from: with oneDNN off
    # (tests/conftest.py) the CPU allocator keeps no statistics, so it is this process's
    # resident high-water mark, read during the run.
    peaks = re.findall(r"(gpu|cpu|rss)_peak ([0-9,]+) MiB", first.stdout)
    assert peaks and {label for label, _ in peaks} == {"rss"}, first.stdout[-2000:]
    assert all(rss_before - 1 <= float(value.replace(",", "")) <= rss_after + 1 for _, value in peaks), \
        (peaks, rss_before, rss_after)
    # The input pipeline's counts: logged at each log step, summed up at the end.
    bad = scalars(tmp_path / "train", "data/bad_examples")
    assert sorted(bad) == [1, 2, 3, 4] and set(bad.values()) == {0.0}
    assert scalars(tmp_path / "train", "data/unknown_label_pixels")
    assert "bad examples skipped" not in first.stdout  # said only when not 0
    second = run_main("--train_steps=6", *common)
    assert "at step 4" in second.stdout
    assert checkpoint_steps(tmp_path) == [4, 6] and restored_step(tmp_path) == 6
    losses = _losses(first.stdout + second.stdout)
    assert losses and all(map(lambda v: v == v and abs(v) < 1e3, losses))
    config = json.load(open(tmp_path / "config.json"))
    assert config["optim"]["train_steps"] == 6 and config["model"]["width_multiplier"] == 0.25
    # What predict and export need of the data set is saved with the run.
    assert len(config["class_names"]) == 19 and config["class_names"][0] == "road"
    assert config["palette"][0] == [128, 64, 128] and len(config["palette"]) == 19
    assert any(name.startswith("events") for name in os.listdir(tmp_path / "train"))
    # Already done: a third run does nothing and says so. (A damaged state file:
    # tests/train/test_faults.py.)
    assert "already trained" in run_main("--train_steps=6", *common).stdout


def _weights(model_dir):
    """{key: value} of every weight in the latest checkpoint of ``model_dir``."""
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(model_dir)))
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()
            if key.startswith("weights/")}


@pytest.mark.slow
def test_an_interrupted_run_ends_where_an_unbroken_one_does(tmp_path, data_dir):
    """Stopped by SIGTERM, with an impatient SIGINT (a double Ctrl-C) during the exit save,
    the run saves, exits 0 and resumes there. A --deterministic run then reads the batches
    that follow in the same input order (not the first epoch's start again), with the
    same dropout masks, and ends with the unbroken run's weights, bit for bit."""
    common = (f"--data_dir={data_dir}", "--mode=train", "--deterministic", "--train_steps=5",
              "--checkpoint_every=1000", *TINY_FLAGS, "--dropout=0.5")
    run_main(f"--model_dir={tmp_path / 'unbroken'}", *common)
    resumed_dir = tmp_path / "resumed"
    proc = start_main(f"--model_dir={resumed_dir}", *common)
    wait_for(proc, r"[^0-9]2/5")
    proc.send_signal(signal.SIGTERM)
    # An impatient second signal must not break into the exit save.
    time.sleep(0.1)  # pending together, SIGINT (2) would be handled before SIGTERM (15)
    proc.send_signal(signal.SIGINT)
    stopped = wait_for(proc, r"SIGTERM: saved .* at step \d")
    # Out within a cluster manager's grace period: once saved, the process exits without
    # winding down the input pipeline (its time: benchmarks, not here).
    output = stopped + proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, output[-3000:]
    assert "SIGINT again: still stopping after SIGTERM" in output and "Traceback" not in output
    stopped_at = restored_step(resumed_dir)
    assert 2 <= stopped_at < 5, output[-3000:]  # stopped early: the resume has steps left
    resumed = run_main(f"--model_dir={resumed_dir}", *common)
    assert f"resumed from {resumed_dir}/ckpt-{stopped_at} at step {stopped_at}" in \
        resumed.stdout, resumed.stdout[-2000:]
    assert restored_step(resumed_dir) == 5
    unbroken, resumed = _weights(tmp_path / "unbroken"), _weights(resumed_dir)
    assert unbroken.keys() == resumed.keys() and len(unbroken) > 50
    for key in unbroken:
        np.testing.assert_array_equal(resumed[key], unbroken[key], err_msg=key)


@pytest.mark.slow
def test_a_checkpoint_without_the_input_position_goes_on_at_its_step(tmp_path, data_dir):
    """A checkpoint from before the input position was saved (no ``batches_read``): the
    input resumes at its step, and the next checkpoint records the position from there
    (it once recorded the batches since the resume only)."""
    config = Config.from_flat(dataset="cityscapes", data_dir=data_dir, width_multiplier=0.25,
                              middle_repeats=1, crop_size=(64, 64), batch_size=2)
    model = builders.model(config, 19)
    optimizer = optim.optimizer(config, model)
    step = tf.Variable(2, dtype=tf.int64)
    checkpoints.Checkpoints(model, str(tmp_path), optimizer=optimizer, step=step).save(2)
    run_main(f"--data_dir={data_dir}", f"--model_dir={tmp_path}", "--mode=train",
             "--train_steps=4", "--checkpoint_every=2", *TINY_FLAGS)
    reader = tf.train.load_checkpoint(str(tmp_path / "ckpt-4"))
    assert not tf.train.load_checkpoint(str(tmp_path / "ckpt-2")).has_tensor(
        "batches_read/.ATTRIBUTES/VARIABLE_VALUE")
    assert int(reader.get_tensor("batches_read/.ATTRIBUTES/VARIABLE_VALUE")) == 4


def _catches_sigterm(proc, timeout=60):
    """Waits until ``proc`` has a handler for SIGTERM (its SigCgt mask in /proc)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(f"/proc/{proc.pid}/status") as f:
            caught = next(line for line in f if line.startswith("SigCgt:")).split()[1]
        if int(caught, 16) >> (signal.SIGTERM - 1) & 1:
            return
        time.sleep(0.01)
    raise AssertionError("no SIGTERM handler")


@pytest.mark.slow
def test_sigterm_during_set_up_exits_0_before_the_first_step(tmp_path, data_dir):
    """The stop handler is in place before absl and TensorFlow are imported. A run that
    is already trained skips its evaluation too."""
    common = (f"--data_dir={data_dir}", f"--model_dir={tmp_path}", "--mode=train_and_eval",
              *TINY_FLAGS)
    for steps in ("100000", "1"):
        proc = start_main(f"--train_steps={steps}", *common)
        _catches_sigterm(proc)
        time.sleep(0.2)  # into absl's or TensorFlow's import, long before the first step
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=120)[0]
        assert proc.returncode == 0, output[-3000:]
        assert "mIoU" not in output and "Traceback" not in output, output[-3000:]
        if steps == "100000":
            assert "SIGTERM during set-up: stopped before the first step" in output, output
            assert tf.train.latest_checkpoint(tmp_path) is None
            run_main("--mode=train", "--train_steps=1", *common[:2], *TINY_FLAGS)


@pytest.mark.slow
def test_sigterm_during_the_evaluation_of_train_and_eval_exits_0(tmp_path, data_dir):
    proc = start_main("--train_steps=2", f"--data_dir={data_dir}", f"--model_dir={tmp_path}",
                      "--mode=train_and_eval", *TINY_FLAGS)
    wait_for(proc, r"restored .*ckpt-2")  # the evaluation has loaded the model
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, output[-3000:]  # the training it stopped after is saved
    assert re.search(r"SIGTERM: evaluation stopped after \d+ images; nothing written", output)
    assert not (tmp_path / "eval" / "whole.json").exists()
    # --mode=eval alone did nothing it was asked to: not a success.
    proc = start_main(f"--data_dir={data_dir}", f"--model_dir={tmp_path}", "--mode=eval",
                      *TINY_FLAGS)
    wait_for(proc, r"restored .*ckpt-2")
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 128 + signal.SIGTERM, output[-3000:]
    assert not (tmp_path / "eval" / "whole.json").exists()


@pytest.mark.slow
def test_nan_loss_stops_without_saving_the_bad_state(tmp_path, data_dir):
    proc = run_main("--mode=train", f"--data_dir={data_dir}", f"--model_dir={tmp_path}",
                    "--train_steps=50", "--checkpoint_every=1", *TINY_FLAGS,
                    "--learning_rate=1e30", check=False)
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    message = proc.stderr.strip().splitlines()[-1]
    assert re.search(r"\(loss (nan|inf|-inf)\) at step (\d+)", message), message
    bad_step = int(re.search(r"at step (\d+)", message).group(1))
    # Every step before the bad one was saved; the bad one was not.
    if bad_step == 1:
        assert tf.train.latest_checkpoint(tmp_path) is None
    else:
        assert checkpoint_steps(tmp_path)[-1] == bad_step - 1
        assert restored_step(tmp_path) == bad_step - 1
