"""Every mode's outputs whole (tfseg/io/outputs.py), on a tiny trained run's real files.

A SIGTERM at chosen moments of a second export, predict, convert and eval (real
processes: each polls the files until its moment, then signals) leaves the old output or
the new, never a mix, a torn file, a staging folder or a ``*_temp`` leftover. Overwrites
are explicit (``--overwrite``), and an output path that is a file is one line naming its
flag (in this process). The report's own: tests/report/test_outputs.py; the mechanism:
tests/io/test_outputs.py.
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import zipfile

import pytest
from PIL import Image

from tests.train.conftest import run_main, start_main, wait_for
from tfseg.io.outputs import STAGING_PREFIX

VAL_CITY = ("leftImg8bit", "val", "synth2")


def _sha(path):
    with open(path, "rb") as f:
        return hashlib.sha1(f.read()).hexdigest()


def _entries(root):
    """[(relative path, mtime, is a file)] under ``root``, what a poll sees of it."""
    found = []
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            try:
                found.append((os.path.relpath(path, root), os.path.getmtime(path),
                              name in files))
            except OSError:  # gone since the listing
                pass
    return found


def _files(root, keep=lambda name: True):
    """{relative path: sha1} of the files under ``root`` whose names ``keep`` says."""
    return {path: _sha(os.path.join(root, path)) for path, _, is_file in _entries(root)
            if is_file and keep(os.path.basename(path))}


def _leftovers(root):
    return [p for p, _, _ in _entries(root) if STAGING_PREFIX in p or "_temp" in p]


def _new_files(name="", count=1):
    """A moment: ``count`` files (whose paths end with ``name``) written since the start."""
    return lambda entries, t0: sum(is_file and path.endswith(name) and mtime >= t0
                                   for path, mtime, is_file in entries) >= count


def _signal_at(moment, root, *args):
    """Starts main.py ARGS, polls ``root`` until ``moment(entries, start)`` holds, sends
    SIGTERM; returns (its return code, its output). It may finish first: then it is
    not signalled."""
    start = time.time()
    proc = start_main(*args)
    lines = []  # read all along: a full pipe would stop the process
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    while proc.poll() is None and time.time() < start + 240:
        if moment(_entries(root), start):
            proc.send_signal(signal.SIGTERM)
            break
        time.sleep(0.002)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        reader.join(timeout=60)
        raise AssertionError(f"main.py {' '.join(args)} did not end:\n"
                             f"{''.join(lines)[-3000:]}") from None
    reader.join(timeout=60)
    output = "".join(lines)
    assert "Traceback" not in output, output[-3000:]
    # Killed by the signal (the default handling: predict, export, convert), or 128 + 15
    # (eval, which stops on its own); 0 when done before it.
    assert proc.returncode in (0, -signal.SIGTERM, 128 + signal.SIGTERM), output[-3000:]
    return proc.returncode, output


def _one_line(proc, line):
    """Exit code 2, and ``line`` alone on stderr."""
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [line], proc.stderr[-2000:]


# --- export -------------------------------------------------------------------------


def _export_state(folder):
    """What an export holds, by content: model.keras by its weights (its metadata has the
    time of saving), the SavedModel's fingerprint.pb left out (new at every save)."""
    state = _files(folder, keep=lambda name: name != "fingerprint.pb")
    if "model.keras" in state:
        try:
            with zipfile.ZipFile(os.path.join(folder, "model.keras")) as keras_file:
                state["model.keras"] = hashlib.sha1(
                    keras_file.read("model.weights.h5")).hexdigest()
        except (zipfile.BadZipFile, KeyError):
            state["model.keras"] = "torn"
    return state


@pytest.fixture(scope="module")
def exports(trained, tmp_path_factory):
    """(model_dir, an export of ckpt-3: the old one, its state, the state of ckpt-6's)."""
    _, model_dir = trained
    root = tmp_path_factory.mktemp("exports")
    for name, checkpoint in (("old", "ckpt-3"), ("new", "ckpt-6")):
        run_main("--mode=export", f"--model_dir={model_dir}", f"--checkpoint={checkpoint}",
                 f"--export_dir={root / name}")
    old, new = _export_state(root / "old"), _export_state(root / "new")
    assert old.keys() == new.keys() and old != new
    return model_dir, root / "old", old, new


EXPORT_MOMENTS = {
    "at the first file": _new_files(),
    "with variables_temp": lambda entries, t0: any("variables_temp" in p for p, _, _ in entries),
    "after saved_model.pb": _new_files("saved_model.pb"),
    "in model.keras": _new_files("model.keras"),
}


@pytest.mark.slow
@pytest.mark.parametrize("moment", EXPORT_MOMENTS)
def test_sigterm_during_a_second_export_leaves_the_old_or_the_new(exports, tmp_path, moment):
    """(Before: a mixed folder, the new saved_model beside the old model.keras, and a stray
    saved_model/variables/variables_temp/.)"""
    model_dir, old_export, old, new = exports
    folder = tmp_path / "export"
    shutil.copytree(old_export, folder)
    code, output = _signal_at(EXPORT_MOMENTS[moment], tmp_path, "--mode=export",
                              f"--model_dir={model_dir}", f"--export_dir={folder}",
                              "--overwrite")
    state = _export_state(folder)
    assert state == old or state == new, (code, state, output[-2000:])
    assert code == -signal.SIGTERM or state == new
    assert not _leftovers(tmp_path), _leftovers(tmp_path)


def _older_export(tmp_path):
    folder = tmp_path / "export"
    (folder / "saved_model").mkdir(parents=True)
    (folder / "saved_model" / "saved_model.pb").write_text("an older export")
    (folder / "model.keras").write_text("an older export")
    return folder


def test_export_into_a_non_empty_folder_needs_overwrite(trained, tmp_path):
    """(Before: replaced in place, without a word.)"""
    _, model_dir = trained
    folder = _older_export(tmp_path)
    before = _files(tmp_path)
    proc = run_main("--mode=export", f"--model_dir={model_dir}", f"--export_dir={folder}",
                    check=False)
    _one_line(proc, f"tfseg: error: --export_dir: {folder} is not empty; pass --overwrite to "
                    f"replace it (or choose another folder)")
    assert _files(tmp_path) == before


@pytest.mark.slow
def test_export_with_overwrite_replaces_the_folder_whole(trained, tmp_path):
    _, model_dir = trained
    folder = _older_export(tmp_path)
    (folder / "saved_model" / "from_an_older_tf.txt").write_text("")
    run_main("--mode=export", f"--model_dir={model_dir}", f"--export_dir={folder}",
             "--overwrite")
    assert sorted(os.listdir(tmp_path)) == ["export"]  # nothing left beside it
    assert sorted(os.listdir(folder)) == ["model.keras", "saved_model"]
    assert "from_an_older_tf.txt" not in os.listdir(folder / "saved_model")  # (before: kept)
    assert "variables/variables.index" in "".join(_files(folder / "saved_model"))
    assert zipfile.is_zipfile(folder / "model.keras")


def test_overwrite_replaces_only_a_folder_that_holds_an_export(trained, tmp_path):
    """A mistyped --export_dir (here the run itself) is never wiped."""
    _, model_dir = trained
    (tmp_path / "model.keras").write_text("an older export")
    (tmp_path / "notes.txt").write_text("mine")
    proc = run_main("--mode=export", f"--model_dir={model_dir}", f"--export_dir={tmp_path}",
                    "--overwrite", check=False)
    _one_line(proc, f"tfseg: error: --export_dir: {tmp_path} holds notes.txt, which is not "
                    f"part of an export; --overwrite replaces only a folder that holds "
                    f"nothing else: choose another folder")
    assert sorted(os.listdir(tmp_path)) == ["model.keras", "notes.txt"]


# --- predict ------------------------------------------------------------------------

IMAGES = 16


@pytest.fixture(scope="module")
def batches(trained, tmp_path_factory):
    """(model_dir, the input folder, an old batch's folder, its state, the new batch's
    state). The inputs are larger than the data set's, so that writing them takes a
    while; the old batch is of other names, so that any mix shows."""
    data_dir, model_dir = trained
    root = tmp_path_factory.mktemp("batches")
    first = sorted(os.listdir(os.path.join(data_dir, *VAL_CITY)))[0]
    with Image.open(os.path.join(data_dir, *VAL_CITY, first)) as image:
        large = image.convert("RGB").resize((384, 256))
    for prefix in ("old", "img"):
        (root / f"{prefix}_images").mkdir()
        for k in range(IMAGES):
            large.save(root / f"{prefix}_images" / f"{prefix}_{k:02d}.png")
    for prefix, name in (("old", "old"), ("img", "new")):
        run_main("--mode=predict", f"--model_dir={model_dir}",
                 f"--input_path={root / f'{prefix}_images'}", f"--output_dir={root / name}")
    return model_dir, root / "img_images", root / "old", _batch(root / "old"), \
        _batch(root / "new")


def _batch(folder):
    """{name: "whole" or "torn"} of the PNGs in ``folder`` (by name and whole: the pixels
    are tested in test_modes.py and test_predict.py)."""
    state = {}
    for name in sorted(os.listdir(folder)):
        try:
            with Image.open(folder / name) as png:
                png.load()
            state[name] = "whole"
        except OSError:
            state[name] = "torn"
    return state


PREDICT_MOMENTS = {"at the first PNG": _new_files(".png"),
                   "half-way": _new_files(".png", count=IMAGES)}


@pytest.mark.slow
@pytest.mark.parametrize("moment", PREDICT_MOMENTS)
def test_sigterm_during_predict_leaves_the_old_batch_or_the_new(batches, tmp_path, moment):
    """(Before: the new batch's first images beside the old batch.)"""
    model_dir, images, old_batch, old, new = batches
    folder = tmp_path / "predictions"
    shutil.copytree(old_batch, folder)
    code, output = _signal_at(PREDICT_MOMENTS[moment], tmp_path, "--mode=predict",
                              f"--model_dir={model_dir}", f"--input_path={images}",
                              f"--output_dir={folder}", "--overwrite")
    state = _batch(folder)
    assert state == old or state == new, (code, state, output[-2000:])
    assert code == -signal.SIGTERM or state == new
    assert not _leftovers(tmp_path), _leftovers(tmp_path)


def test_predict_into_a_non_empty_folder_needs_overwrite_and_replaces_the_batch(trained,
                                                                               tmp_path):
    data_dir, model_dir = trained
    images = os.path.join(data_dir, *VAL_CITY)
    folder = tmp_path / "out"
    folder.mkdir()
    Image.new("RGB", (4, 4)).save(folder / "an_older_batch_label.png")
    before = _files(tmp_path)
    predict = ("--mode=predict", f"--model_dir={model_dir}", f"--input_path={images}",
               f"--output_dir={folder}")
    _one_line(run_main(*predict, check=False),
              f"tfseg: error: --output_dir: {folder} is not empty; pass --overwrite to "
              f"replace it (or choose another folder)")
    assert _files(tmp_path) == before
    run_main(*predict, "--overwrite")
    assert sorted(os.listdir(tmp_path)) == ["out"]
    stems = sorted(name[:-len(".png")] for name in os.listdir(images))
    assert sorted(os.listdir(folder)) == sorted(f"{s}{suffix}.png" for s in stems
                                                for suffix in ("_label", "_overlay"))
    # Another file, or the inputs themselves, in the folder: never replaced.
    (folder / "notes.txt").write_text("mine")
    _one_line(run_main(*predict, "--overwrite", check=False),
              f"tfseg: error: --output_dir: {folder} holds notes.txt, which is not part of a "
              f"predict batch (PNG files); --overwrite replaces only a folder that holds "
              f"nothing else: choose another folder")
    (folder / "notes.txt").unlink()
    inputs = tmp_path / "in"
    shutil.copytree(images, inputs)
    _one_line(run_main("--mode=predict", f"--model_dir={model_dir}", f"--input_path={inputs}",
                       f"--output_dir={inputs}", "--overwrite", check=False),
              f"tfseg: error: --output_dir: {inputs} holds the input image "
              f"{inputs}/{stems[0]}.png, and predictions replace the folder as a whole; "
              f"choose another folder")
    assert sorted(os.listdir(inputs)) == sorted(os.listdir(images))


@pytest.mark.parametrize("mode,flag", [("export", "--export_dir"), ("predict", "--output_dir"),
                                       ("convert", "--tfrecord_dir")])
def test_an_output_folder_that_is_a_file_is_one_line_naming_its_flag(trained, tmp_path, mode,
                                                                     flag):
    """(Before: ``[Errno 17] File exists: ...`` without the flag.)"""
    data_dir, model_dir = trained
    path = tmp_path / "a_file"
    path.write_text("in the way")
    common = (f"--mode={mode}", f"--model_dir={model_dir}", f"--data_dir={data_dir}",
              "--dataset=cityscapes", f"--input_path={os.path.join(data_dir, *VAL_CITY)}")
    _one_line(run_main(*common, f"{flag}={path}", check=False),
              f"tfseg: error: {flag}: {path} is a file, not a folder")
    _one_line(run_main(*common, f"{flag}={path}/sub", check=False),
              f"tfseg: error: {flag}: {path} is a file, not a folder (in the way of "
              f"{path}/sub)")
    assert sorted(os.listdir(tmp_path)) == ["a_file"] and path.read_text() == "in the way"


# --- convert ------------------------------------------------------------------------


PAIRS = {"train": 12, "val": 6}


@pytest.fixture(scope="module")
def conversions(tmp_path_factory):
    """(data_dir, a conversion into 2 shards a split: the old one, its files). Larger
    images than the trained run's, so that converting takes a while."""
    from tfseg.data import write_synthetic_cityscapes

    root = tmp_path_factory.mktemp("conversions")
    data_dir = write_synthetic_cityscapes(str(root / "data"), num_train=PAIRS["train"],
                                          num_val=PAIRS["val"], height=256, width=512, seed=0)
    run_main("--mode=convert", "--dataset=cityscapes", f"--data_dir={data_dir}",
             f"--tfrecord_dir={root / 'old'}", "--tfrecord_shards=2")
    return data_dir, root / "old", _files(root / "old")


def _split_state(folder, split, old):
    """"old" if the split's files are those of ``old``; "new" if they are a whole
    conversion into 3 shards (each shard reads to the end and holds the count its JSON
    gives, for every pair); else its files."""
    import tensorflow as tf

    def of_split(files):
        return {name: sha for name, sha in files.items()
                if name == f"{split}.json" or name.startswith(f"{split}-")}

    state = of_split(_files(folder))
    if state == of_split(old):
        return "old"
    shards = [f"{split}-{k:05d}-of-00003.tfrecord" for k in range(3)]
    if set(state) != {f"{split}.json", *shards}:
        return state
    try:
        sizes = json.load(open(folder / f"{split}.json"))["shard_sizes"]
        counts = {name: sum(1 for _ in tf.data.TFRecordDataset(str(folder / name)))
                  for name in shards}
    except (ValueError, KeyError, tf.errors.DataLossError):
        return state
    return "new" if counts == sizes and sum(counts.values()) == PAIRS[split] else state


CONVERT_MOMENTS = {"at the first train shard": _new_files(".tfrecord"),
                   "after train.json": _new_files("train.json"),
                   "at the first val shard": _new_files("val-00000-of-00003.tfrecord")}


@pytest.mark.slow
@pytest.mark.parametrize("moment", CONVERT_MOMENTS)
def test_sigterm_during_convert_leaves_each_split_old_or_new(conversions, tmp_path, moment):
    """(Before: torn shards, and the old shards of the split beside the new.)"""
    data_dir, old_records, old = conversions
    folder = tmp_path / "records"
    shutil.copytree(old_records, folder)
    code, output = _signal_at(CONVERT_MOMENTS[moment], tmp_path, "--mode=convert",
                              "--dataset=cityscapes", f"--data_dir={data_dir}",
                              f"--tfrecord_dir={folder}", "--tfrecord_shards=3")
    states = {split: _split_state(folder, split, old) for split in ("train", "val")}
    assert all(state in ("old", "new") for state in states.values()), (code, states,
                                                                        output[-2000:])
    assert all(name.split("-")[0].split(".")[0] in states for name in os.listdir(folder))
    assert code == -signal.SIGTERM or states == {"train": "new", "val": "new"}
    assert not _leftovers(tmp_path), _leftovers(tmp_path)


# --- eval ---------------------------------------------------------------------------


def _eval_state(folder, old):
    """"old" if ``folder`` holds the files of ``old`` unchanged, "new" if it holds a whole
    new evaluation of ckpt-6 (whole.json, a whole_confusion.csv that agrees with it, one
    more TensorBoard events file) beside the old events, else what it holds."""
    state = _files(folder)
    if state == old:
        return "old"
    try:
        result = json.load(open(folder / "whole.json"))
        rows = open(folder / "whole_confusion.csv").read().splitlines()
    except (OSError, ValueError):
        return state
    events = [name for name in state if name.startswith("events")]
    whole = (result["step"] == 6 and len(rows) == 20 and len(events) == 2
             and sum(int(v) for row in rows[1:] for v in row.split(",")[1:])
             == result["labelled_pixels"]
             and set(state) == {"whole.json", "whole_confusion.csv", *events})
    return "new" if whole and {k: old[k] for k in old if k.startswith("events")}.items() \
        <= state.items() else state


@pytest.fixture
def evaluated(trained_copy):
    """(data_dir, a copy of the trained run evaluated at ckpt-3, its eval folder's files)."""
    data_dir, model_dir = trained_copy
    run_main("--mode=eval", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
             "--checkpoint=ckpt-3")
    return data_dir, model_dir, _files(model_dir / "eval")


@pytest.mark.slow
def test_sigterm_during_eval_leaves_the_old_results_or_the_new(evaluated):
    """Eval stops between images on a signal (nothing written: test_loop.py, here over
    earlier results), and finishes a write it has begun; exit 128 + 15 either way.
    (This held before too: eval has a handler of its own.)"""
    data_dir, model_dir, old = evaluated
    args = ("--mode=eval", f"--data_dir={data_dir}", f"--model_dir={model_dir}")
    proc = start_main(*args)
    wait_for(proc, r"restored .*ckpt-6")
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=300)[0]
    assert proc.returncode == 128 + signal.SIGTERM, output[-2000:]
    assert _eval_state(model_dir / "eval", old) == "old"
    writing = lambda entries, t0: any(  # noqa: E731
        mtime >= t0 and (STAGING_PREFIX in path or path == "eval/whole.json")
        for path, mtime, _ in entries)
    code, output = _signal_at(writing, model_dir, *args)
    assert code in (0, 128 + signal.SIGTERM), output[-2000:]
    assert _eval_state(model_dir / "eval", old) == "new", output[-2000:]
    assert not _leftovers(model_dir), _leftovers(model_dir)


def _file_size_limit(limit):
    """For a child: writes past ``limit`` bytes fail (EFBIG), as on a full disk."""
    import resource

    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


@pytest.mark.slow
def test_a_write_cut_short_during_eval_keeps_the_previous_results(evaluated):
    """A file-size limit that whole.json passes half-way (as a full disk would): one line,
    and the previous whole.json, whole_confusion.csv and events as they were. (Before: a
    torn eval.json.)"""
    data_dir, model_dir, old = evaluated
    limit = os.path.getsize(model_dir / "eval" / "whole.json") // 2
    proc = run_main("--mode=eval", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
                    check=False, preexec_fn=_file_size_limit(limit))
    assert "mIoU" in proc.stdout, proc.stdout[-2000:]
    # (The limit also stops AutoGraph's temporary files: TensorFlow warns about those.)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"tfseg: error: --model_dir: evaluated, but could not write {model_dir}/eval: "
        f"File too large"), proc.stderr[-2000:]
    assert _eval_state(model_dir / "eval", old) == "old"
    assert not _leftovers(model_dir), _leftovers(model_dir)


def test_a_second_eval_replaces_its_files_and_keeps_the_events(evaluated):
    data_dir, model_dir, old = evaluated
    run_main("--mode=eval", f"--data_dir={data_dir}", f"--model_dir={model_dir}")
    assert _eval_state(model_dir / "eval", old) == "new"
    assert not _leftovers(model_dir)

