"""A signal while the TFLite converter runs (real processes: the signal is sent once the
converter's MLIR thread pool, ``llvm-worker-N``, is up): the previous export as it was,
no staging folder; Ctrl-C in one line (it printed 45 lines of traceback) and the end
Python's Ctrl-C has (130 in a shell), SIGTERM the end it has in every mode that writes
(killed by it, 143 in a shell)."""

import hashlib
import os
import signal
import subprocess
import time

import pytest

from tests.train.conftest import run_main, start_main
from tfseg.io.outputs import STAGING_PREFIX


def _state(folder):
    """{file name: sha1} of an export folder."""
    return {name: hashlib.sha1((folder / name).read_bytes()).hexdigest()
            for name in sorted(os.listdir(folder))}


@pytest.fixture(scope="module")
def old_export(trained, tmp_path_factory):
    """(model_dir, a .tflite export of ckpt-3: the previous export a signal must spare)."""
    _, model_dir = trained
    folder = tmp_path_factory.mktemp("old") / "export"
    run_main("--mode=export", f"--model_dir={model_dir}", "--checkpoint=ckpt-3",
             f"--export_dir={folder}", "--export_format=tflite")
    return model_dir, folder


def _converting(pid):
    """Whether the TFLite converter (MLIR, whose thread pool names its threads
    llvm-worker-N) has started in process ``pid``."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/comm") as f:
                if f.read().startswith("llvm-worker"):
                    return True
        except OSError:  # the thread ended
            pass
    return False


def _signal_while_converting(sig, model_dir, folder):
    """Starts a second export of the run's latest checkpoint over ``folder``, sends ``sig``
    once the converter runs; returns (return code, stdout, stderr)."""
    proc = start_main("--mode=export", f"--model_dir={model_dir}", f"--export_dir={folder}",
                      "--export_format=tflite", "--overwrite", stderr=subprocess.PIPE)
    deadline = time.time() + 240
    while proc.poll() is None and not _converting(proc.pid) and time.time() < deadline:
        time.sleep(0.002)
    signalled = proc.poll() is None and _converting(proc.pid)
    if signalled:
        proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert signalled, f"the converter was never seen running:\n{out[-2000:]}{err[-2000:]}"
    return proc.returncode, out, err


@pytest.mark.slow  # 10-23 s: more than its share of the fast tier's 12 minutes
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_the_tflite_conversion_leaves_the_old_export_and_one_line(
        old_export, tmp_path, sig):
    model_dir, old = old_export
    folder = tmp_path / "export"
    folder.mkdir()
    for name in os.listdir(old):
        (folder / name).write_bytes((old / name).read_bytes())
    before = _state(folder)
    code, out, err = _signal_while_converting(sig, model_dir, folder)
    assert code == -sig, (code, out[-2000:], err[-3000:])  # killed by it: 128 + sig in a shell
    assert "Traceback" not in out + err, err[-3000:]
    if sig == signal.SIGINT:
        assert err.strip().splitlines() == [
            f"tfseg: interrupted during the TFLite conversion; the previous export in "
            f"{folder} is as it was"], err[-3000:]
    else:
        assert err.strip() == "", err[-3000:]
    assert "exported" not in out, out[-2000:]
    assert _state(folder) == before
    assert [n for n in os.listdir(tmp_path) if n.startswith(STAGING_PREFIX)] == []
