"""main.py --model_devices: a run split across logical CPU devices resumes on one device
and back, exactly; the cuts' per-device prediction is printed; bad input is one line.

main.py runs in a fresh process that first gives TF that many logical CPU devices
(``tests/split/on_devices.py``, which then runs main.py itself)."""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from tests.split.test_place import on_devices
from tests.train.conftest import TINY_FLAGS, checkpoint_steps

# A constant learning rate (the end rate is the start rate): the runs stop at step 2
# by --train_steps, which would otherwise change the schedule.
FLAGS = (*TINY_FLAGS, "--mode=train", "--deterministic", "--checkpoint_every=1",
         "--keep_checkpoints=5", "--end_learning_rate=0.01")


def run_split(count, *args, check=True):
    proc = on_devices(count, "main", *args, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}:\n{proc.stdout[-3000:]}\n"
                             f"{proc.stderr[-3000:]}")
    return proc


def _values(path):
    reader = tf.train.load_checkpoint(str(path))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH"}


@pytest.mark.slow
@pytest.mark.timeout(600)  # over the suite's 300 s per test on a busy machine
def test_a_split_run_resumes_on_one_device_and_back_exactly(data_dir, tmp_path):
    common = (f"--data_dir={data_dir}", *FLAGS)
    split = "--model_devices=CPU:0,CPU:1,CPU:2"
    one = tmp_path / "one"
    run_split(3, *common, f"--model_dir={one}", "--train_steps=3")
    # Split for 2 steps, then on one device to 3.
    there = tmp_path / "there"
    proc = run_split(3, *common, f"--model_dir={there}", "--train_steps=2", split)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("  /device:CPU:")]
    assert "deeplab_v3_plus split across 3 devices" in proc.stdout
    assert [line.split(":")[2] for line in lines] == ["0", "1", "2"], proc.stdout
    assert all("MiB predicted" in line for line in lines)
    run_split(3, *common, f"--model_dir={there}", "--train_steps=3")
    # On one device for 2 steps (the first run's), then split to 3.
    back = tmp_path / "back"
    shutil.copytree(one, back)
    for name in os.listdir(back):
        if name.startswith("ckpt-3"):
            os.remove(back / name)
    with open(back / "checkpoint", "w") as state:
        state.write('model_checkpoint_path: "ckpt-2"\nall_model_checkpoint_paths: "ckpt-1"\n'
                    'all_model_checkpoint_paths: "ckpt-2"\n')
    run_split(3, *common, f"--model_dir={back}", "--train_steps=3", split)
    expected = _values(one / "ckpt-3")
    assert any("weights/logits" in name for name in expected)
    for model_dir in (there, back):
        assert checkpoint_steps(model_dir)[-1] == 3
        got = _values(model_dir / "ckpt-3")
        assert got.keys() == expected.keys()
        for name, value in expected.items():
            np.testing.assert_array_equal(got[name], value, err_msg=f"{model_dir}: {name}")


@pytest.mark.slow
def test_bad_model_devices_exit_2_in_one_line(data_dir, tmp_path):
    """What needs the devices or the cuts (the config's own refusals: tests/cli/test_main.py)."""
    common = (f"--data_dir={data_dir}", f"--model_dir={tmp_path / 'run'}", *FLAGS,
              "--train_steps=1")
    many = ",".join(f"CPU:{i}" for i in range(40))
    cases = [
        (2, ("--model_devices=CPU:0,GPU:0",),
         "--model_devices: no device 'GPU:0' here; there are CPU:0, CPU:1"),
        (40, (f"--model_devices={many}",), "--model_devices: 40 devices for the "),
        (2, ("--model_devices=CPU:0,CPU:1", "--memory_budget_gb=0.001"),
         "--memory_budget_gb: /device:CPU:"),
    ]
    for count, args, line in cases:
        proc = run_split(count, *common, *args, check=False)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, (args, proc.stderr[-2000:])
        assert lines[0].startswith(f"tfseg: error: {line}"), lines[0]
    assert not os.path.exists(tmp_path / "run" / "checkpoint")
