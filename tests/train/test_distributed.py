"""tf.distribute: 2 mirrored replicas update like 1 device; two local workers train together."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.train.conftest import ROOT, main_env, restored_step


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["sync_batch"])
@pytest.mark.timeout(600)  # over the suite's 300 s per test on a busy machine
def test_two_mirrored_replicas_update_like_one_device(norm):
    """Same global batch (with unevenly split ignore pixels and class weights), 2 steps, float64.

    "sync_batch" is what the default --norm=batch becomes over several replicas: the
    norm with cross-replica state, and the loss's cross-replica sums, in one run
    (~55 s on 2 cores). `python -m tests.train.replicas group` runs the same check
    with group norm (no cross-replica state: nothing the sync_batch run does not cover).
    """
    proc = subprocess.run([sys.executable, "-m", "tests.train.replicas", norm],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=main_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    for norm, result in json.loads(proc.stdout.strip().splitlines()[-1]).items():
        assert result["max_update"] > 1e-3, norm  # the steps did move the weights
        assert result["max_weight_diff"] < 1e-9 * max(1.0, result["max_update"]), (norm, result)
        np.testing.assert_allclose(result["one"], result["two"], rtol=1e-9, err_msg=norm)


def _free_ports(count):
    import socket

    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _run_workers(model_dir, data_dir, train_steps):
    """main.py --mode=train as two workers of one MultiWorkerMirroredStrategy cluster;
    returns their outputs (chief first)."""
    from tests.train.conftest import MAIN, TINY_FLAGS

    workers = [f"127.0.0.1:{port}" for port in _free_ports(2)]
    procs = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = dict(main_env(), TF_CONFIG=json.dumps(tf_config))
        procs.append(subprocess.Popen(
            [sys.executable, MAIN, "--mode=train", "--strategy=multi_worker",
             f"--data_dir={data_dir}", f"--model_dir={model_dir}",
             f"--train_steps={train_steps}", "--checkpoint_every=2", *TINY_FLAGS],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=240)[0])
    finally:
        for proc in procs:
            proc.kill()
    for proc, output in zip(procs, outputs):
        assert proc.returncode == 0, output[-3000:]
    return outputs


@pytest.mark.slow
@pytest.mark.timeout(600)  # over the suite's 300 s per test on a busy machine
def test_two_local_workers_train_together_and_resume(tmp_path, data_dir):
    """MultiWorkerMirroredStrategy from TF_CONFIG, two processes on loopback ports, sync
    batch norm: 2 steps, then both resume from the chief's checkpoint and go on to 4."""
    first = _run_workers(tmp_path, data_dir, 2)
    # --norm=batch (the default) becomes sync batch norm over the two replicas.
    assert all("sync_batch norm, 2 replica(s)" in output for output in first), first[0][-3000:]
    assert all("from scratch" in output for output in first)
    names = set(os.listdir(tmp_path))
    assert {"checkpoint", "ckpt-2.index", "config.json"} <= names
    assert not any(name.startswith("worker_tmp") for name in names)  # scratch copies removed

    second = _run_workers(tmp_path, data_dir, 4)
    for output in second:  # the non-chief too: it has no checkpoints of its own
        assert f"resumed from {tmp_path}/ckpt-2 at step 2" in output, output[-3000:]
    assert restored_step(tmp_path) == 4
