"""Outputs written whole (tfseg/io/outputs.py), on real files: a folder swapped in as a
whole, files renamed into place, nothing changed by an exception, a staging folder left
by a kill -9 cleaned up by the next write, and signals sent to real processes at chosen
moments (each loads the module alone: a fraction of a second, no TensorFlow)."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tfseg.io import outputs
from tfseg.errors import InputError

MODULE = outputs.__file__


def _tree(root):
    """{relative path: contents} of every file under ``root``; folders end with /."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            found[os.path.relpath(os.path.join(folder, name), root) + "/"] = None
        for name in files:
            path = os.path.join(folder, name)
            with open(path) as f:
                found[os.path.relpath(path, root)] = f.read()
    return found


def _write(root, files):
    for name, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        with open(os.path.join(root, name), "w") as f:
            f.write(text)


OLD = {"export/saved_model/variables/v": "old", "export/model.keras": "old", "other": "mine"}


def test_a_replaced_folder_is_swapped_in_whole(tmp_path):
    _write(tmp_path, OLD)
    with outputs.replaced_folder(str(tmp_path / "export")) as new:
        assert os.listdir(new) == [] and os.path.dirname(os.path.dirname(new)) != str(tmp_path)
        _write(new, {"saved_model/v": "new", "model.keras": "new"})
        assert _tree(tmp_path / "export")["model.keras"] == "old"  # nothing yet
    assert _tree(tmp_path) == {"export/": None, "export/saved_model/": None,
                               "export/saved_model/v": "new", "export/model.keras": "new",
                               "other": "mine"}


def test_an_exception_while_building_changes_nothing(tmp_path):
    _write(tmp_path, OLD)
    before = _tree(tmp_path)
    with pytest.raises(RuntimeError):
        with outputs.replaced_folder(str(tmp_path / "export")) as new:
            _write(new, {"model.keras": "half"})
            raise RuntimeError("while building")
    assert _tree(tmp_path) == before
    with pytest.raises(RuntimeError):  # a new folder: not even the folder is left
        with outputs.replaced_folder(str(tmp_path / "a" / "b")) as new:
            raise RuntimeError("while building")
    assert _tree(tmp_path) == before


def test_staged_files_replace_their_names_remove_the_named_and_keep_the_rest(tmp_path):
    _write(tmp_path, {"eval.json": "old", "confusion.csv": "old", "frontier.png": "old",
                      "events.1": "old", "sub/x": "old"})
    with outputs.staged(str(tmp_path), last=("eval.json",)) as stage:
        _write(stage.dir, {"eval.json": "new", "confusion.csv": "new", "events.2": "new",
                           "sub/y": "new"})
        stage.remove("frontier.png", "missing.png")
    assert _tree(tmp_path) == {"eval.json": "new", "confusion.csv": "new", "events.1": "old",
                               "events.2": "new", "sub/": None, "sub/y": "new"}


def test_replaced_file(tmp_path):
    path = tmp_path / "run" / "config.json"
    for text in ("first", "second"):
        with outputs.replaced_file(str(path)) as new:
            _write(os.path.dirname(new), {os.path.basename(new): text})
            assert not path.exists() or path.read_text() == "first"
        assert _tree(tmp_path) == {"run/": None, "run/config.json": text}


def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_kill_between_two_renames_is_undone_by_the_next_write(tmp_path):
    """A staging folder of a process that is gone: the entry it had renamed away (the
    old export, its new one not yet in place) is put back, the rest removed."""
    stale = tmp_path / f"{outputs.STAGING_PREFIX}{_dead_pid()}-abc"
    _write(stale, {"old/export/model.keras": "old", "new/export/model.keras": "new?"})
    _write(tmp_path, {f"{outputs.STAGING_PREFIX}{os.getpid()}-stale/new/x": "a previous life "
                      "of this pid", "eval.json": "old"})
    with outputs.staged(str(tmp_path)) as stage:
        _write(stage.dir, {"eval.json": "new"})
    assert _tree(tmp_path) == {"export/": None, "export/model.keras": "old", "eval.json": "new"}


def test_an_output_folder_is_named_with_its_flag(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match=f"^--export_dir: {tmp_path}/file is a file, not a "
                                         f"folder$"):
        outputs.require_folder(str(tmp_path / "file"), "--export_dir")
    with pytest.raises(InputError, match=f"^--output_dir: {tmp_path}/file is a file, not a "
                                         f"folder \\(in the way of {tmp_path}/file/a/b\\)$"):
        outputs.require_folder(str(tmp_path / "file" / "a" / "b"), "--output_dir")
    outputs.require_folder(str(tmp_path / "new" / "a"), "--output_dir")


def test_a_non_empty_folder_is_replaced_only_with_overwrite_and_only_if_it_is_an_output(
        tmp_path):
    def check(overwrite):
        outputs.require_replaceable(str(tmp_path), "--output_dir", overwrite,
                                    "a predict batch (PNG files)", lambda n: n.endswith(".png"))

    check(False)  # empty
    (tmp_path / "a_label.png").write_text("")
    with pytest.raises(InputError, match=f"^--output_dir: {tmp_path} is not empty; pass "
                                         f"--overwrite to replace it"):
        check(False)
    check(True)
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(InputError, match=f"^--output_dir: {tmp_path} holds notes.txt, which "
                                         f"is not part of a predict batch \\(PNG files\\); "
                                         f"--overwrite replaces only a folder that holds "
                                         f"nothing else"):
        check(True)


# A process that writes ``OUT/export`` through the module alone (no TensorFlow), over an
# old export; MOMENT says where it signals itself (as a signal from outside would land).
CHILD = textwrap.dedent("""
    import importlib.util, os, signal, sys, time
    spec = importlib.util.spec_from_file_location("outputs", sys.argv[1])
    outputs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(outputs)
    out, moment, sig = sys.argv[2], sys.argv[3], getattr(signal, sys.argv[4])
    if moment == "own_handler":  # as training and eval have: they stop between steps
        signal.signal(sig, lambda *a: print("handled", flush=True))
    rename = os.rename
    def rename_and_signal(src, dst):  # the first rename of the swap: the old one moves away
        rename(src, dst)
        if moment == "swap":
            os.kill(os.getpid(), sig)
            print("still swapping", flush=True)
    os.rename = rename_and_signal
    class Finalized:
        def __del__(self):  # the signal lands while a finalizer runs (TF frees functions so)
            os.kill(os.getpid(), sig)
            sum(range(10000))
    try:
        with outputs.replaced_folder(os.path.join(out, "export")) as new:
            with open(os.path.join(new, "model.keras"), "w") as f:
                f.write("ha")
                f.flush()
                if moment in ("build", "own_handler"):
                    os.kill(os.getpid(), sig)
                if moment == "finalizer":
                    Finalized()
                f.write("lf")
            os.mkdir(os.path.join(new, "saved_model"))
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
        sys.exit(130)
    print("done", flush=True)
""")


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("moment", ["build", "finalizer", "swap", "own_handler"])
def test_a_signal_leaves_the_old_or_the_new_and_no_staging(tmp_path, moment, sig):
    """While building: the old export stays, and the signal ends the process as it would
    have (SIGTERM: killed by it; SIGINT: KeyboardInterrupt), also where it lands inside a
    finalizer, which ignores what it raises. During the swap: the new one is swapped in
    first. Under a handler of the program's own: the write finishes."""
    _write(tmp_path, {"export/model.keras": "old", "export/saved_model/v": "old"})
    old, new = _tree(tmp_path), {"export/": None, "export/model.keras": "half",
                                 "export/saved_model/": None}
    proc = subprocess.run([sys.executable, "-c", CHILD, MODULE, str(tmp_path), moment, sig],
                          capture_output=True, text=True, timeout=60,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(MODULE))))
    if moment == "own_handler":
        assert proc.returncode == 0 and proc.stdout.split() == ["handled", "done"], proc
        assert _tree(tmp_path) == new
        return
    killed = -signal.SIGTERM if sig == "SIGTERM" else 130
    assert proc.returncode == killed, proc
    assert "done" not in proc.stdout and "Traceback" not in proc.stderr, proc
    if moment == "swap":
        assert "still swapping" in proc.stdout
    assert _tree(tmp_path) == (new if moment == "swap" else old)


def test_a_swap_that_fails_half_way_puts_the_old_folder_back(tmp_path, monkeypatch):
    """The old export renamed away, then the new one cannot be renamed in: the old one
    goes back (the staging folder, which held it, is then removed)."""
    _write(tmp_path, OLD)
    before = _tree(tmp_path)

    def replace(src, dst):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(outputs.os, "replace", replace)
    with pytest.raises(OSError):
        with outputs.replaced_folder(str(tmp_path / "export")) as new:
            _write(new, {"model.keras": "new"})
    assert _tree(tmp_path) == before


# A folder that root cannot write either (sysfs), where this machine has one.
UNWRITABLE = "/sys/kernel"


def _unwritable():
    try:
        outputs.require_writable(UNWRITABLE, "--x")
    except InputError:
        return True
    return False


def test_a_folder_files_cannot_be_written_in_is_refused_naming_its_flag(tmp_path):
    outputs.require_writable(str(tmp_path / "new" / "report"), "--report_dir")
    assert not (tmp_path / "new").exists()  # nothing made by the check
    assert os.listdir(tmp_path) == []
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match=r"^--report_dir: .*file is a file, not a folder"):
        outputs.require_writable(str(tmp_path / "file" / "report"), "--report_dir")
    if not _unwritable():
        pytest.skip(f"{UNWRITABLE} is writable here")
    with pytest.raises(InputError, match=rf"^--report_dir: cannot write in {UNWRITABLE}: "):
        outputs.require_writable(f"{UNWRITABLE}/tfseg/report", "--report_dir")
