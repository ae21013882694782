import os
import re
import subprocess
import sys
import time

import pytest

from tests import command as cli
from tests.command import MAIN, ROOT, main_env  # noqa: F401 (the tests' one launcher)

# A tiny network and small crops: every code path, a few seconds per run on 2 CPU cores.
# Width 0.25, not 0.125: at 0.125 oneDNN on CPU intermittently corrupts the heap
# ("corrupted size vs. prev_size") in training steps.
TINY_FLAGS = ("--dataset=cityscapes", "--width_multiplier=0.25", "--middle_repeats=1",
              "--crop_size=64,64", "--batch_size=2", "--warmup_steps=0", "--log_every=1",
              "--learning_rate=0.01", "--seed=0")

# Background runs of this test (start_main): killed when it ends, whatever failed first.
_STARTED = []


def run_main(*args, timeout=180, check=True, process=False, **popen_kwargs):
    """main.py ARGS: in this process (``tests.command.run``), or in a fresh one where the
    property needs it (``process=True``, or Popen arguments such as ``preexec_fn``).
    Returns a CompletedProcess (stdout and stderr as text). ``timeout`` bounds a fresh
    process; an in-process run is bounded by the test's own timeout (setup.cfg)."""
    if process or popen_kwargs:
        proc = cli.run_process(*args, timeout=timeout, **popen_kwargs)
    else:
        proc = cli.run(*args)
    if check and proc.returncode != 0:
        raise AssertionError(f"main.py {' '.join(args)} exited {proc.returncode}:\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def start_main(*args, **popen_kwargs):
    """main.py as a background process (stdout and stderr piped together, text), killed
    at the end of the test that started it."""
    options = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    options.update(popen_kwargs)
    proc = subprocess.Popen([sys.executable, MAIN, *args], env=main_env(), cwd=ROOT,
                            **options)
    _STARTED.append(proc)
    return proc


@pytest.fixture(autouse=True)
def _no_background_run_outlives_its_test():
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)


def wait_for(proc, pattern, timeout=120):
    """Reads proc's output until ``pattern`` appears; returns everything read."""
    seen, deadline = "", time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        seen += line
        if re.search(pattern, seen):
            return seen
    proc.kill()
    raise AssertionError(f"{pattern!r} never appeared:\n{seen[-3000:]}")


def checkpoint_steps(model_dir):
    """The steps of the checkpoints that the state file of ``model_dir`` names."""
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(str(model_dir))
    return sorted(int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths)


def restored_step(model_dir):
    """The step of the latest checkpoint in ``model_dir`` (restoring it)."""
    import tensorflow as tf

    step = tf.Variable(0, dtype=tf.int64)
    tf.train.Checkpoint(step=step).restore(
        tf.train.latest_checkpoint(str(model_dir))).expect_partial()
    return int(step.numpy())


def scalars(directory, tag):
    """{step: value} of a TensorBoard scalar in the event files of ``directory``."""
    import tensorflow as tf

    values = {}
    for name in sorted(os.listdir(directory)):
        if name.startswith("events"):
            for event in tf.compat.v1.train.summary_iterator(os.path.join(directory, name)):
                for value in event.summary.value:
                    if value.tag == tag:
                        values[event.step] = float(tf.make_ndarray(value.tensor))
    return values


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    """A small synthetic Cityscapes-layout set (read as "cityscapes")."""
    from tfseg.data import write_synthetic_cityscapes

    return write_synthetic_cityscapes(str(tmp_path_factory.mktemp("data")), num_train=6,
                                      num_val=2, height=64, width=96, seed=0)


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory, data_dir):
    """(data_dir, model_dir, the run's CompletedProcess) of a tiny model trained for 6
    steps."""
    model_dir = str(tmp_path_factory.mktemp("trained"))
    proc = run_main("--mode=train", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
                    "--train_steps=6", "--checkpoint_every=3", *TINY_FLAGS)
    return data_dir, model_dir, proc


@pytest.fixture(scope="session")
def trained(trained_run):
    """(data_dir, model_dir) of a tiny model trained for 6 steps."""
    return trained_run[:2]


@pytest.fixture
def trained_copy(trained, tmp_path):
    """(data_dir, a copy of the trained run): for a test that writes into the run, so
    that no result depends on which tests ran before."""
    import shutil

    data_dir, model_dir = trained
    copy = tmp_path / "trained"
    shutil.copytree(model_dir, copy)
    return data_dir, copy
