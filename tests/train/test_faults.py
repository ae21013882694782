"""Nothing lost, whatever breaks: main.py on a trained run's real files, damaged, filled up,
signalled, killed and cut off from its services. Signals, kills and file-size limits go to
real processes; the other runs call main.py in this process (``tests.command``).

Every case asserts the exit code, one line on stderr naming the file, folder or flag, no
traceback, and that no checkpoint older than the damage was deleted or overwritten.
"""

import functools
import hashlib
import os
import re
import resource
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

from tests.train.conftest import (TINY_FLAGS, checkpoint_steps,
                                  restored_step, run_main, start_main, wait_for)


@pytest.fixture
def run(trained_copy):
    """(data_dir, a copy of the trained run with ckpt-3 and ckpt-6, their fingerprints)."""
    data_dir, copy = trained_copy
    return data_dir, copy, _fingerprints(copy)


def _fingerprints(model_dir, steps=(3, 6)):
    """{file name: sha1} of the checkpoint files of ``steps``."""
    return {name: hashlib.sha1((model_dir / name).read_bytes()).hexdigest()
            for name in sorted(os.listdir(model_dir))
            if re.fullmatch(r"ckpt-(\d+)\..*", name)
            and int(re.match(r"ckpt-(\d+)", name).group(1)) in steps}


def _train(data_dir, model_dir, *extra, steps=9, **kwargs):
    return run_main("--mode=train", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
                    f"--train_steps={steps}", "--checkpoint_every=3", "--keep_checkpoints=5",
                    *TINY_FLAGS, *extra, check=False, **kwargs)


def _one_line(proc, code, line):
    """``proc`` exited with ``code``, its stderr is ``line`` alone (a regex), no traceback."""
    errors = [text for text in proc.stderr.strip().splitlines()
              if not re.match(r"WARNING: All log messages|I0000|To enable the following", text)]
    assert proc.returncode == code, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert len(errors) == 1 and re.fullmatch(line, errors[0]), proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["missing", "garbage"])
def test_a_missing_state_file_resumes_from_the_newest_checkpoint(run, damage):
    """Not from scratch, writing over ckpt-3 and ckpt-6 (each kind of damage to the state
    file, in the library: tests/runtime/test_resume.py)."""
    data_dir, model_dir, before = run
    if damage == "missing":
        (model_dir / "checkpoint").unlink()
    else:
        (model_dir / "checkpoint").write_text("garbage\n")
    proc = _train(data_dir, model_dir)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert f"warning: {model_dir}/checkpoint is missing or unreadable" in proc.stdout
    assert f"resumed from {model_dir}/ckpt-6 at step 6" in proc.stdout
    assert checkpoint_steps(model_dir) == [3, 6, 9] and _fingerprints(model_dir) == before


@pytest.mark.slow
def test_a_truncated_checkpoint_is_refused_by_eval_and_skipped_by_training(run):
    """(A truncated index or data file, each in the library: tests/runtime/test_resume.py.)"""
    data_dir, model_dir, before = run
    damaged = model_dir / "ckpt-6.data-00000-of-00001"
    damaged.write_bytes(damaged.read_bytes()[:100])
    name = re.escape(f"{model_dir}/ckpt-6")
    proc = run_main("--mode=eval", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
                    "--checkpoint=ckpt-6", check=False)
    _one_line(proc, 2, f"tfseg: error: checkpoint {name} is damaged or unreadable: .+")
    proc = _train(data_dir, model_dir)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert re.search(f"warning: checkpoint {name} is damaged .*; trying the one before",
                     proc.stdout), proc.stdout[-2000:]
    assert f"resumed from {model_dir}/ckpt-3 at step 3" in proc.stdout
    # ckpt-3 as it was; ckpt-6 written again by the run that trained through step 6.
    assert _fingerprints(model_dir, steps=(3,)) == _fingerprints_of(before, 3)
    assert checkpoint_steps(model_dir) == [3, 6, 9] and restored_step(model_dir) == 9


def _fingerprints_of(fingerprints, step):
    return {name: sha for name, sha in fingerprints.items() if name.startswith(f"ckpt-{step}.")}


def _small_disk(path, size_mb):
    """Mounts a tmpfs of ``size_mb`` at ``path`` (a real full disk); False where this user
    may not mount."""
    path.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs",
                           str(path)], capture_output=True).returncode == 0


def _file_size_limit(limit):
    """For a child: writes past ``limit`` bytes fail (EFBIG), as on a full disk."""
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_a_full_disk_during_a_save_is_one_line_and_keeps_the_latest(run, tmp_path):
    """On a tmpfs that holds ckpt-3 and ckpt-6 (9 MB each) but not a third, else (no
    right to mount) under a file-size limit."""
    data_dir, copy, before = run
    disk = tmp_path / "disk"
    mounted = _small_disk(disk, 24)
    try:
        model_dir = disk / "run" if mounted else copy
        if mounted:
            shutil.copytree(copy, model_dir)
        listed = sorted(os.listdir(model_dir))
        limit = {} if mounted else {"preexec_fn": _file_size_limit(1 << 20)}
        proc = _train(data_dir, model_dir, **limit)
        errno = "No space left on device" if mounted else "File too large"
        _one_line(proc, 2, re.escape(f"tfseg: error: --model_dir: could not save checkpoint "
                                     f"9 in {model_dir} (") + f".*{errno}.*"
                  + re.escape(f"; the latest is still {model_dir}/ckpt-6"))
        # No partial ckpt-9 or ckpt-9_temp left filling the disk; ckpt-3 and ckpt-6 intact.
        assert sorted(os.listdir(model_dir)) == listed and _fingerprints(model_dir) == before
        assert restored_step(model_dir) == 6
    finally:
        if mounted:
            subprocess.run(["umount", str(disk)], check=True)


@pytest.mark.slow
def test_a_double_ctrl_c_in_the_set_up_after_the_resume_saves_nothing_and_loses_nothing(run):
    """(The run may be out before the second: stopping in set-up takes milliseconds. A
    second signal in an exit save: tests/train/test_loop.py.)"""
    data_dir, model_dir, before = run
    proc = start_main("--mode=train", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
                      "--train_steps=100000", "--checkpoint_every=3", *TINY_FLAGS)
    wait_for(proc, "resumed from .*ckpt-6 at step 6")
    proc.send_signal(signal.SIGINT)
    time.sleep(0.02)  # two pending SIGINTs would merge into one
    proc.send_signal(signal.SIGINT)  # (a no-op if the run has already stopped)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0 and "Traceback" not in output, output[-3000:]
    # Stopped before the first step (nothing to save), or after it (saved there).
    assert re.search(r"SIGINT during set-up: stopped before the first step|SIGINT: saved "
                     r".*ckpt-7 at step 7", output), output[-3000:]
    assert _fingerprints(model_dir) == before and restored_step(model_dir) in (6, 7)


@pytest.mark.timeout(120)  # the 2 s timeout plus start-up, not a hang
def test_an_unreachable_data_service_is_one_line_naming_it(run):
    data_dir, model_dir, before = run
    with socket_without_server() as address:
        proc = _train(data_dir, model_dir, f"--data_service=grpc://{address}",
                      "--data_service_timeout=2")
    _one_line(proc, 2, re.escape(f"tfseg: error: --data_service: no tf.data service "
                                 f"dispatcher answers at grpc://{address} within 2 s") + ".*")
    assert _fingerprints(model_dir) == before and checkpoint_steps(model_dir) == [3, 6]


class socket_without_server:
    """A local address where nothing listens (the port is held, never listened on)."""

    def __enter__(self):
        import socket

        self.socket = socket.socket()
        self.socket.bind(("localhost", 0))
        return f"localhost:{self.socket.getsockname()[1]}"

    def __exit__(self, *exc):
        self.socket.close()


@pytest.mark.slow
def test_missing_label_files_are_skipped_with_skip_bad_examples(trained, tmp_path):
    """A label file that is gone (train) or a folder in its place (val)."""
    data_dir = tmp_path / "data"
    shutil.copytree(trained[0], data_dir)
    labels = sorted(str(p) for p in data_dir.rglob("*_gtFine_labelIds.png"))
    train_label = next(p for p in labels if "/train/" in p)
    val_label = next(p for p in labels if "/val/" in p)
    os.remove(train_label)
    os.remove(val_label)
    os.makedirs(val_label)
    common = ("--mode=train_and_eval", f"--data_dir={data_dir}",
              f"--model_dir={tmp_path / 'run'}", "--train_steps=2", *TINY_FLAGS)
    proc = run_main(*common, check=False)
    image = re.escape(train_label.replace("gtFine_labelIds", "leftImg8bit")
                      .replace("/gtFine/", "/leftImg8bit/"))
    _one_line(proc, 2, f"tfseg: error: .*label file for {image} not found.*")
    proc = run_main(*common, "--skip_bad_examples")
    assert "Traceback" not in proc.stderr
    counts = re.findall(r"(?:train|val) data: (\d+) bad examples skipped", proc.stdout)
    # Training's (each time the input reaches the pair: it reads ahead, over epochs), then
    # evaluation's: the one val pair.
    assert len(counts) == 2 and int(counts[0]) >= 1 and counts[1] == "1", proc.stdout[-3000:]
    assert "mIoU" in proc.stdout and restored_step(tmp_path / "run") == 2


def _progress(path):
    """The last step the progress of the run logging to ``path`` showed (0: none); its
    lines count from step 0, also in a resumed run."""
    steps = re.findall(r"step +(\d+)/\d{5}", open(path, errors="replace").read())
    return int(steps[-1]) if steps else 0


def _kill_when(moment, data_dir, model_dir, log, rng, second=None):
    """Starts training in ``model_dir``, logging to ``log``, and kills it (SIGKILL) at
    ``moment``: "random" (0-2 s into training), "temp" (a save's temporary folder
    exists) or "state" (a save has just updated the state file). ``second``, if given,
    runs while it trains. Returns (the step it resumed from, the last step its progress
    bar showed)."""
    with open(log, "w") as out:
        proc = start_main("--mode=train", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
                          "--train_steps=100000", "--checkpoint_every=2",
                          "--keep_checkpoints=3", *TINY_FLAGS, stdout=out)
    state, deadline = model_dir / "checkpoint", time.time() + 120
    while _progress(log) < 1 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None and _progress(log), open(log).read()[-3000:]
    if second is not None:
        # A second trainer on the same folder would interleave checkpoints: refused.
        refused = second()
        assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1] == (
            f"tfseg: error: --model_dir: {model_dir} is in use by another training run "
            f"(pid {proc.pid}); stop it or choose another --model_dir"), refused.stderr
    saved = state.stat().st_mtime_ns if state.exists() else 0
    until, hit = time.time() + (rng.uniform(0, 2) if moment == "random" else 60), False
    while time.time() < until and not hit:
        hit = (moment == "temp" and any(n.endswith("_temp") for n in os.listdir(model_dir))
               or moment == "state" and state.exists() and state.stat().st_mtime_ns != saved)
    proc.kill()
    assert hit or moment == "random", f"no {moment} moment in 60 s"
    proc.wait(timeout=60)
    text = open(log, errors="replace").read()
    resumed = re.search(r"resumed from \S+ at step (\d+)", text)
    return int(resumed.group(1)) if resumed else 0, _progress(log)


@pytest.mark.slow
@pytest.mark.timeout(600)  # over the suite's 300 s per test on a busy machine
def test_kills_at_a_random_moment_and_in_saves_lose_at_most_one_interval_each(
        trained, tmp_path):
    """Each of the three moments once (a kill costs a start-up: ~15 s on 2 cores; the
    second and third kill a run that resumed from the kill before). The run goes on
    each time from its latest checkpoint, which loads whole, with at
    most one checkpoint interval (2 steps) lost per kill. The killed run's lock never
    blocks the next (the kernel releases a flock), and a save's temp folder that a kill
    left is removed."""
    import numpy as np
    import tensorflow as tf

    data_dir, model_dir, rng = trained[0], tmp_path / "run", np.random.default_rng(0)
    restored = 0
    second = functools.partial(_train, data_dir, model_dir)
    for kill, moment in enumerate(["random", "temp", "state"]):
        start, shown = _kill_when(moment, data_dir, model_dir, tmp_path / "log.txt", rng,
                                  second=None if kill else second)
        assert start == restored, (moment, start, restored)
        previous, restored = restored, restored_step(model_dir)
        # Monotone, at most one interval behind what the run showed, nothing it did not do.
        assert previous <= restored and shown - 2 <= restored <= shown + 1, \
            (moment, previous, restored, shown)
        state = tf.train.get_checkpoint_state(str(model_dir))
        assert state or restored == 0  # killed before its first save
        latest = state.model_checkpoint_path if state else None
        for path in state.all_model_checkpoint_paths if state else ():
            if path != latest and not os.path.exists(path + ".index"):
                # Killed between CheckpointManager's state write and its deletion of the
                # oldest: listed, gone; the next resume lists it no more (checked below).
                continue
            _load_whole(path)
    final = _train(data_dir, model_dir, "--checkpoint_every=2", steps=restored + 2)
    assert final.returncode == 0, final.stderr[-2000:]
    assert f"at step {restored}" in final.stdout and restored_step(model_dir) == restored + 2
    assert not [name for name in os.listdir(model_dir) if name.endswith("_temp")]
    for path in tf.train.get_checkpoint_state(str(model_dir)).all_model_checkpoint_paths:
        _load_whole(path)


def _load_whole(path):
    """Reads every tensor of the checkpoint ``path`` (raises if any is missing or torn)."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(path)
    for key in reader.get_variable_to_shape_map():
        reader.get_tensor(key)


@pytest.mark.slow  # two runs: 16 s on 2 idle cores
def test_a_bad_file_the_input_reaches_mid_run_keeps_the_steps_before_it(tmp_path):
    """A label of the wrong size that the shuffle reaches a few steps in: the run stops
    with one line, and the steps before it are saved, not lost back to the last
    --checkpoint_every; fixed, the run resumes from there."""
    from tests.data.trees import cityscapes_tree, save
    data_dir, model_dir = tmp_path / "data", tmp_path / "run"
    pairs = cityscapes_tree(str(data_dir), ids=[7, 8, 26], size=(40, 56), n=8)
    cityscapes_tree(str(data_dir), split="val", ids=[7, 8, 26], size=(40, 56), n=1)
    _, label = pairs[5]
    good = open(label, "rb").read()
    save(label, np.zeros((20, 28), np.uint8))
    flags = ("--mode=train", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
             *TINY_FLAGS, "--batch_size=1", "--crop_size=33,49", "--checkpoint_every=100")
    proc = run_main(*flags, "--train_steps=20", check=False)
    saved = re.search(r"; saved (\S+) at step (\d+): run again to resume$", proc.stderr.strip())
    _one_line(proc, 2, rf"tfseg: error: .*{re.escape(os.path.basename(label))}.*")
    assert saved, proc.stderr[-2000:]
    step = int(saved.group(2))
    # The seed puts the bad pair after some good ones: steps to lose, once a step is logged.
    logged = re.findall(r"step +(\d+)/20 ", proc.stdout)
    assert step >= 1 and logged and int(logged[-1]) == step, proc.stdout[-2000:]
    assert restored_step(model_dir) == step
    open(label, "wb").write(good)
    run_main(*flags, f"--train_steps={step + 2}")
    assert restored_step(model_dir) == step + 2


@pytest.mark.slow  # a training run with an evaluation: 10 s idle, 29 s on a busy machine
def test_a_bad_evaluation_file_during_training_keeps_the_step_it_evaluated(tmp_path):
    """--eval_every's evaluation reads a label of the wrong size: the step it evaluated
    is saved before the run stops, though --checkpoint_every is far off."""
    from tests.data.trees import cityscapes_tree, save
    data_dir, model_dir = tmp_path / "data", tmp_path / "run"
    cityscapes_tree(str(data_dir), ids=[7, 8, 26], size=(40, 56), n=2)
    (_, label), = cityscapes_tree(str(data_dir), split="val", ids=[7, 8], size=(40, 56), n=1)
    save(label, np.zeros((20, 28), np.uint8))
    proc = run_main("--mode=train", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
                    *TINY_FLAGS, "--batch_size=1", "--crop_size=33,49", "--train_steps=4",
                    "--eval_every=2", "--checkpoint_every=100", check=False)
    _one_line(proc, 2, rf"tfseg: error: .*{re.escape(os.path.basename(label))}.*; saved "
                       rf"\S+ckpt-2 at step 2: run again to resume")
    assert restored_step(model_dir) == 2
