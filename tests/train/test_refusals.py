"""Nothing wrong passes silently: a damaged config.json, a changed architecture
on resume, weights that were not loaded and a checkpoint that rotation removed under an
eval are each one line naming the file or the flag, before anything is written; allowed
changes are logged. The command runs in this process (``tests.command``) on copies of a
tiny trained run and on a folder data set written here."""

import json
import os

import numpy as np
import pytest
from PIL import Image

from tests.train.conftest import TINY_FLAGS, run_main
from tfseg.runtime import files

# TINY_FLAGS without the flags a keras.applications backbone refuses.
NO_MIDDLE = tuple(flag for flag in TINY_FLAGS if not flag.startswith("--middle_repeats"))


def _tree(folder):
    """{relative path: (size, mtime)} of every file under ``folder``."""
    found = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            found[os.path.relpath(path, folder)] = (os.path.getsize(path),
                                                    os.path.getmtime(path))
    return found


def _one_line(proc):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, proc.stderr[-3000:],
                                                      proc.stdout[-2000:])
    assert lines[0].startswith("tfseg: error: ") and "Traceback" not in proc.stderr
    return lines[0]


def _damage(path, case):
    saved = json.loads(open(path).read())
    if case == "invalid_json":
        text = open(path).read()[:-40]  # cut short, as by a full disk
    elif case == "wrong_type":
        saved["model"]["width_multiplier"] = "wide"
        text = json.dumps(saved)
    else:
        saved["model"]["colour"] = "red"
        text = json.dumps(saved)
    with open(path, "w") as f:
        f.write(text)
    return {"invalid_json": "not valid JSON", "wrong_type": "model.width_multiplier",
            "unknown_field": "model.colour"}[case]


def _image(folder):
    os.makedirs(folder, exist_ok=True)
    image = np.random.default_rng(0).integers(0, 256, (40, 56, 3), dtype=np.uint8)
    Image.fromarray(image).save(os.path.join(folder, "frame.png"))
    return str(folder)


def _mode_args(mode, data_dir, run, tmp_path):
    """The command line of ``mode`` on ``run``; what it would write goes under tmp_path."""
    args = (f"--mode={mode}", f"--data_dir={data_dir}", f"--model_dir={run}")
    return args + {
        "train": ("--train_steps=8", "--checkpoint_every=3", *TINY_FLAGS),
        "eval": (),
        "predict": (f"--input_path={_image(tmp_path / 'images')}",
                    f"--output_dir={tmp_path / 'out'}"),
        "export": (f"--export_dir={tmp_path / 'out'}",),
        "report": (f"--report_dir={tmp_path / 'out'}", *TINY_FLAGS),
    }[mode]


@pytest.mark.parametrize("case", ["invalid_json", "wrong_type", "unknown_field"])
@pytest.mark.parametrize("mode", ["train", "eval", "predict", "export", "report"])
def test_a_damaged_config_json_is_refused_in_every_mode_before_anything_is_written(
        trained_copy, tmp_path, mode, case):
    data_dir, run = trained_copy
    path = str(run / files.CONFIG_FILE)
    field = _damage(path, case)
    before = _tree(run)
    line = _one_line(run_main(*_mode_args(mode, data_dir, run, tmp_path), check=False))
    assert path in line and field in line, line
    assert _tree(run) == before  # config.json kept as it was, nothing added
    assert not (tmp_path / "out").exists()


def test_a_resume_of_another_architecture_names_the_flag_and_the_recorded_value(
        trained_copy):
    data_dir, run = trained_copy
    path = str(run / files.CONFIG_FILE)
    common = (f"--data_dir={data_dir}", f"--model_dir={run}", "--checkpoint_every=3")
    for changed, recorded in ((("--backbone=mobilenetv2", *NO_MIDDLE), "--backbone=xception65"),
                              (("--width_multiplier=0.5", TINY_FLAGS[0], *TINY_FLAGS[2:]),
                               "--width_multiplier=0.25"),
                              (("--norm=group", *TINY_FLAGS), "--norm=batch")):
        before = _tree(run)
        line = _one_line(run_main("--mode=train", "--train_steps=7", *common, *changed,
                                  check=False))
        flag = recorded.split("=")[0]
        assert line.startswith(f"tfseg: error: {flag}: ") and recorded in line, line
        assert path in line and _tree(run) == before


@pytest.mark.slow  # a training step: ~15-30 s on 2 busy cores
def test_a_resume_with_other_steps_and_learning_rate_says_so_and_records_them(trained_copy):
    data_dir, run = trained_copy
    path = str(run / files.CONFIG_FILE)
    common = (f"--data_dir={data_dir}", f"--model_dir={run}", "--checkpoint_every=3")
    proc = run_main("--mode=train", "--train_steps=7", "--learning_rate=0.02", *common,
                    *TINY_FLAGS[:-2], "--seed=0")
    assert "train_steps 6 -> 7" in proc.stdout and "learning_rate 0.01 -> 0.02" in proc.stdout
    saved = json.load(open(path))
    assert saved["optim"]["train_steps"] == 7 and saved["optim"]["learning_rate"] == 0.02


def test_a_checkpoint_of_another_class_count_names_the_recorded_data_set(
        trained_copy, folder_data):
    """Resumed on a data set of other classes (a change config.json allows: a converted
    copy of the same set has the same classes), the checkpoint's logits do not fit: the
    line names the settings its config.json records."""
    _, run = trained_copy
    line = _one_line(run_main("--mode=train", "--train_steps=7", "--dataset=folder",
                              f"--data_dir={folder_data}", f"--model_dir={run}",
                              *TINY_FLAGS[1:], check=False))
    assert "does not match the model" in line and "--dataset=cityscapes" in line, line
    assert "--backbone" in line, line


@pytest.fixture(scope="module")
def folder_data(tmp_path_factory):
    """A folder data set of 3 classes: 2 training and 2 validation pairs of 64x64."""
    root = tmp_path_factory.mktemp("folder")
    (root / "classes.txt").write_text("ground\nsky\nthing\n")
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for k in range(2):
            for sub, array in (("images", rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)),
                               ("masks", rng.integers(0, 3, (64, 64), dtype=np.uint8))):
                os.makedirs(root / split / sub, exist_ok=True)
                Image.fromarray(array).save(root / split / sub / f"f{k}.png")
    return str(root)


@pytest.mark.parametrize("mode", ["eval", "predict", "export"])
def test_inference_refuses_weights_that_were_not_loaded(trained, folder_data, tmp_path, mode):
    """--init_checkpoint of a 19-class run for a 3-class data set: its logits cannot be
    loaded, and a result from random logits would pass for the model's."""
    _, run = trained
    args = _mode_args(mode, folder_data, tmp_path / "new", tmp_path)
    line = _one_line(run_main(*args, "--dataset=folder", f"--init_checkpoint={run}",
                              check=False))
    assert line.startswith("tfseg: error: --init_checkpoint: ") and run in line, line
    assert "logits" in line and "19" in line and "3" in line and "--mode=train" in line, line
    assert not (tmp_path / "out").exists() and not (tmp_path / "new").exists()


@pytest.fixture(scope="module")
def folder_run(trained, folder_data, tmp_path_factory):
    """(its CompletedProcess, folder): a run on the folder data set, fine-tuned for one step
    from the 19-class run (whose logits it skips, as training should)."""
    _, source = trained
    run = str(tmp_path_factory.mktemp("folder_run"))
    proc = run_main("--mode=train", "--dataset=folder", f"--data_dir={folder_data}",
                    f"--model_dir={run}", f"--init_checkpoint={source}", "--train_steps=1",
                    *TINY_FLAGS[1:])
    return proc, run


def test_training_still_skips_logits_of_another_class_count_and_says_so(folder_run):
    proc, run = folder_run
    assert "skipped 2 (logits of another class count" in proc.stdout, proc.stdout[-2000:]
    assert files.latest_checkpoint(run).endswith("ckpt-1")


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_a_folder_run_with_invalid_config_json_is_refused_naming_the_file(
        folder_run, folder_data, tmp_path, mode):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(folder_run[1], run)
    path = str(run / files.CONFIG_FILE)
    with open(path, "w") as f:
        f.write("{\"model\": ")
    args = (f"--mode={mode}", "--dataset=folder", f"--data_dir={folder_data}",
            f"--model_dir={run}", "--train_steps=2", *TINY_FLAGS[1:])
    line = _one_line(run_main(*args, check=False))
    assert path in line and "not valid JSON" in line and "logits" not in line, line


def test_eval_reads_the_newest_checkpoint_when_rotation_removes_the_one_it_found(
        trained_copy, monkeypatch):
    """Training rotates checkpoints while eval starts: the one the state file named is
    gone when eval pins it to read. Eval goes on with the newest, and names no flag that
    was not given; with --checkpoint given, that one is named."""
    import shutil

    from tfseg.evaluation import loading

    data_dir, run = trained_copy
    pin = loading.pinned
    calls = []

    def rotate_first(path):
        if not calls:  # a save of ckpt-9, then the rotation of the one eval found
            for name in os.listdir(run):
                if name.startswith("ckpt-6."):
                    shutil.copy(run / name, run / name.replace("ckpt-6", "ckpt-9"))
            files.write_state(str(run), str(run / "ckpt-9"), [str(run / "ckpt-3")])
            for name in os.listdir(run):
                if name.startswith(os.path.basename(path) + "."):
                    os.remove(run / name)
        calls.append(path)
        return pin(path)

    monkeypatch.setattr(loading, "pinned", rotate_first)
    proc = run_main("--mode=eval", f"--data_dir={data_dir}", f"--model_dir={run}")
    assert [os.path.basename(p) for p in calls] == ["ckpt-6", "ckpt-9"], calls
    result = json.load(open(run / "eval" / "whole.json"))
    assert result["checkpoint"].endswith("ckpt-9") and "--checkpoint" not in proc.stdout
    calls.clear()
    line = _one_line(run_main("--mode=eval", f"--data_dir={data_dir}", f"--model_dir={run}",
                              "--checkpoint=ckpt-3", check=False))
    assert "ckpt-3" in line and "--checkpoint" in line, line


def test_eval_keeps_the_step_of_a_checkpoint_rotated_away_while_it_scores(
        trained_copy, monkeypatch):
    """The checkpoint eval restored is removed while eval scores the split (a training
    run rotating it): whole.json still records the step it evaluated."""
    from tfseg.evaluation import evaluate as evaluate_lib

    data_dir, run = trained_copy
    score = evaluate_lib.run_metrics

    def rotate_then_score(*args, **kwargs):
        for name in os.listdir(run):
            if name.startswith("ckpt-6."):
                os.remove(run / name)
        return score(*args, **kwargs)

    monkeypatch.setattr(evaluate_lib, "run_metrics", rotate_then_score)
    run_main("--mode=eval", f"--data_dir={data_dir}", f"--model_dir={run}")
    result = json.load(open(run / "eval" / "whole.json"))
    assert result["checkpoint"].endswith("ckpt-6") and result["step"] == 6, result


@pytest.mark.slow
def test_eval_during_training_reads_a_whole_checkpoint_each_time(trained_copy):
    """A real training run saves and rotates a checkpoint every step (keeping one) while
    eval runs over and over on its folder: every eval exits 0 with a checkpoint that
    training wrote, and names no flag the user did not pass."""
    from tests.train.conftest import start_main, wait_for

    data_dir, run = trained_copy
    trainer = start_main("--mode=train", f"--data_dir={data_dir}", f"--model_dir={run}",
                         "--train_steps=100000", "--checkpoint_every=1",
                         "--keep_checkpoints=1", *TINY_FLAGS)
    wait_for(trainer, r"step +8/")
    steps = []
    for _ in range(3):
        proc = run_main("--mode=eval", f"--data_dir={data_dir}", f"--model_dir={run}",
                        check=False)
        assert proc.returncode == 0 and "--checkpoint" not in proc.stdout + proc.stderr, \
            proc.stdout[-2000:] + proc.stderr[-2000:]
        steps.append(json.load(open(run / "eval" / "whole.json"))["step"])
    assert trainer.poll() is None  # training went on throughout
    assert all(step >= 7 for step in steps) and steps == sorted(steps), steps
