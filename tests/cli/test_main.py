"""The command line: flagfiles parse, bad input is one line on stderr and exit code 2.

The command's ``main`` runs in this process (``tests.command``); the help text and a signal at
start-up need a process of their own."""

import glob
import json
import os
import signal
import subprocess
import sys

import pytest

from tests import command as cli
from tfseg.config import MODES, Config, flag_table

ROOT = cli.ROOT
FLAGFILES = sorted(glob.glob(os.path.join(ROOT, "flags", "*.flags")))


_main = cli.run


def _settings(proc):
    """{flag: value} of the config that --mode=validate printed."""
    assert proc.returncode == 0, proc.stderr
    return Config.settings_of(json.loads(proc.stdout))


def test_there_are_flagfiles():
    names = {os.path.basename(f) for f in FLAGFILES}
    assert {"synthetic.flags", "cityscapes_xception65_os16_fullres.flags",
            "cityscapes_xception65_os16_crop769.flags", "voc_xception65_os16.flags",
            "camvid.flags"} <= names


@pytest.mark.parametrize("flagfile", FLAGFILES, ids=os.path.basename)
def test_flagfile_parses_and_documents_itself(flagfile):
    lines = open(flagfile).read().splitlines()
    assert lines[0].startswith("# ") and any(line.startswith("#   tfseg ") for line in lines)
    assert any(line.startswith("# Expected") for line in lines)
    config = _settings(_main(f"--flagfile={flagfile}", "--mode=validate"))
    assert config["mode"] == "validate"


def test_synthetic_flagfile_is_the_default():
    default = _settings(_main("--mode=validate"))
    from_file = _settings(_main(f"--flagfile={ROOT}/flags/synthetic.flags", "--mode=validate"))
    assert default == from_file == Config.from_flat(mode="validate").flat()


def test_fullres_flagfile_is_batch_1_group_norm_memory_saving():
    config = _settings(_main(f"--flagfile={ROOT}/flags/cityscapes_xception65_os16_fullres.flags",
                             "--mode=validate"))
    assert config["crop_size"] == (1024, 2048) and config["batch_size"] == 1
    assert config["norm"] == "group" and config["memory_saving"] is True


BAD = {
    "unknown_mode": (("--mode=dance",), "--mode"),
    "batch_0": (("--batch_size=0",), "--batch_size"),
    "negative_budget": (("--mode=report", "--memory_budget_gb=-1"), "--memory_budget_gb"),
    "crop_not_fitting_stride": (("--crop_size=100,100",), "--crop_size"),
    "crop_not_fitting_os8": (("--crop_size=513,515", "--output_stride=8"), "--crop_size"),
    "crop_not_a_number": (("--crop_size=big",), "--crop_size"),
    "unknown_flag": (("--no_such_flag=1",), "no_such_flag"),
    "bad_norm": (("--norm=layer",), "--norm"),
    "bad_recompute": (("--recompute=entry_block2",), "--recompute"),
    "stray_argument": (("train",), "unexpected arguments"),
    "not_an_integer": (("--train_steps=ten",), "train_steps"),
    "missing_flagfile": (("--flagfile=/nonexistent/x.flags",), "x.flags"),
    "dropout_2": (("--dropout=2",), "--dropout"),
    "momentum_5": (("--momentum=5",), "--momentum"),
    "unknown_dataset": (("--dataset=foo", "--mode=validate"), "--dataset"),
    "scale_range_reversed": (("--scale_range=2,0.5", "--mode=validate"), "--scale_range"),
    "data_service_not_grpc": (("--data_service=localhost:5050",), "--data_service"),
    "negative_eval_every": (("--eval_every=-1",), "--eval_every"),
    "convert_tfrecords": (("--mode=convert", "--dataset=tfrecord"), "--dataset"),
    "zero_shards": (("--mode=convert", "--tfrecord_shards=0"), "--tfrecord_shards"),
    # Keras never compiles strategy.run + apply_gradients inside tf.cond; refused, not untested.
    "jit_with_mirrored": (("--strategy=mirrored", "--jit_compile"), "--jit_compile"),
    "jit_with_multi_worker": (("--strategy=multi_worker", "--jit_compile", "--mode=validate"),
                              "--jit_compile"),
    "bad_weight_decay_type": (("--weight_decay_type=adamw",), "--weight_decay_type"),
    "zero_skipped_updates": (("--max_skipped_updates=0",), "--max_skipped_updates"),
    # Refused by the config, before any data or device is looked at.
    "device_overhead_negative": (("--memory_budget_gb=8", "--device_overhead_gb=-2"),
                                 "--device_overhead_gb: must be >= 0, or -1"),
    "model_devices_with_mirrored": (("--model_devices=CPU:0,CPU:1", "--strategy=mirrored"),
                                    "--model_devices: splits one model across devices and "
                                    "does not combine with --strategy=mirrored"),
    "model_devices_with_jit": (("--model_devices=CPU:0,CPU:1", "--jit_compile"),
                               "--model_devices: places each"),
    "model_devices_twice": (("--model_devices=CPU:0,CPU:0",),
                            "--model_devices: names a device twice"),
    "class_shards_with_eval_every": (("--class_shards=2", "--eval_every=1"),
                                     "--eval_every: evaluates the training model"),
    "class_devices_with_mirrored": (("--class_devices=CPU:0", "--strategy=mirrored"),
                                    "--class_devices: splits the head"),
    "class_shards_negative": (("--class_shards=-1",), "--class_shards: must be >= 0"),
    "empty_model_dir": (("--mode=eval", "--model_dir="), "--model_dir: is empty"),
    # Non-finite numbers are refused like negative ones (inf was an OverflowError).
    "infinite_budget": (("--mode=report", "--memory_budget_gb=inf"),
                        "--memory_budget_gb: must be a finite number, got inf"),
    "nan_learning_rate": (("--learning_rate=nan",), "--learning_rate: must be a finite"),
    "infinite_scale": (("--scale_range=0.5,inf",), "--scale_range: must be finite"),
    "nan_timeout": (("--data_service_timeout=nan",), "--data_service_timeout: must be a fin"),
    # Device and path flags, each checked the same way, naming the flag.
    "class_devices_twice": (("--class_devices=CPU:0,CPU:0", "--class_shards=2"),
                            "--class_devices: names a device twice (CPU:0)"),
    "model_devices_twice_spelled_apart": (("--model_devices=/cpu:0,CPU:0",),
                                          "--model_devices: names a device twice"),
    "model_dir_a_file": (("--mode=eval", f"--model_dir={cli.MAIN}"),
                         f"--model_dir: {cli.MAIN} is a file, not a folder"),
    "data_dir_a_file": (("--mode=train", f"--data_dir={cli.MAIN}"),
                        f"--data_dir: {cli.MAIN} is a file, not a folder"),
}


@pytest.mark.parametrize("args,names", BAD.values(), ids=BAD.keys())
def test_bad_flags_exit_2_with_one_line(args, names):
    proc = _main(*args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfseg: error:"), proc.stderr
    assert names in lines[0]


def test_data_and_eval_flags_reach_the_config():
    config = _settings(_main("--data_service=grpc://localhost:5050", "--deterministic",
                             "--skip_bad_examples", "--eval_every=100", "--mode=validate"))
    assert config["data_service"] == "grpc://localhost:5050"
    assert config["deterministic"] and config["skip_bad_examples"] and config["eval_every"] == 100
    default = _settings(_main("--mode=validate"))
    assert (default["data_service"], default["deterministic"], default["eval_every"]) == \
        ("", False, 0)


def test_report_takes_the_class_count_from_the_run_else_the_data_set(tmp_path):
    """CamVid's classes are those of its class_dict.csv (void rows are not classes);
    no images are needed."""
    from tfseg.evaluation.loading import num_classes

    (tmp_path / "class_dict.csv").write_text(
        "name,r,g,b\nsky,128,128,128\nroad,128,64,128\ncar,64,0,128\nVoid,0,0,0\n")
    run = str(tmp_path / "run")
    camvid = Config.from_flat(dataset="camvid", data_dir=str(tmp_path), model_dir=run)
    assert num_classes(camvid) == 3
    assert num_classes(Config.from_flat(dataset="voc", model_dir=run)) == 21
    assert num_classes(Config.from_flat(dataset="synthetic", model_dir=run)) == 19
    # A trained run's own classes come first.
    os.makedirs(run)
    with open(os.path.join(run, "config.json"), "w") as f:
        json.dump({"dataset": "tfrecord", "class_names": ["a", "b"]}, f)
    assert num_classes(Config.from_flat(dataset="tfrecord", model_dir=run)) == 2


def test_missing_data_dir_exits_2_naming_it(tmp_path):
    """(Evaluation needs a checkpoint first: tests/train/test_modes.py.)"""
    missing = tmp_path / "no_such_dir"
    proc = _main("--mode=train", "--dataset=cityscapes", f"--data_dir={missing}",
                 f"--model_dir={tmp_path / 'run'}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfseg: error:"), proc.stderr[-2000:]
    assert "no_such_dir" in lines[0], lines[0]
    assert not (tmp_path / "run" / "checkpoint").exists()


def test_every_mode_has_a_runner_and_every_setting_a_flag():
    from tfseg.cli import main, modes

    assert tuple(modes.MODES) == MODES
    # Each field of each section is a flag, under one name, with its help and default.
    for name, (_, field) in flag_table().items():
        assert main.FLAGS[name].help == field.metadata["help"], name
    assert Config.from_flags({name: main.FLAGS[name].default for name in flag_table()}) == \
        Config()


def test_a_signal_at_start_up_of_another_mode_is_not_a_success():
    """The stop handler is in place from the first line; modes that do not honour it
    between steps exit with 128 + the signal, as without it, not 0."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "main.py"), "--mode=validate"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    while True:  # until the handler is in: then absl is still importing
        with open(f"/proc/{proc.pid}/status") as f:
            caught = next(line for line in f if line.startswith("SigCgt:")).split()[1]
        if int(caught, 16) >> (signal.SIGTERM - 1) & 1 or proc.poll() is not None:
            break
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode in (128 + signal.SIGTERM, -signal.SIGTERM)


@pytest.mark.slow
def test_the_readme_command_in_a_fresh_process(tmp_path):
    """``tfseg``, the installed console script and the README's first command, end to end
    as a user runs it: it writes the synthetic set, trains and evaluates (3 steps here)."""
    script = os.path.join(os.path.dirname(sys.executable), "tfseg")
    assert os.path.exists(script), "no tfseg command: pip install -e . declares it (setup.cfg)"
    data, run = tmp_path / "data", tmp_path / "run"
    # The user's environment, where TensorFlow's start-up lines appear (the absl notice
    # and cpu_feature_guard's line with oneDNN off too): no TF_CPP_MIN_LOG_LEVEL. oneDNN
    # stays off, as in every training test (tests/conftest.py); test_quiet.py runs the
    # command with it on.
    env = {k: v for k, v in cli.main_env().items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([script, f"--data_dir={data}", f"--model_dir={run}",
                           "--train_steps=3", "--warmup_steps=0", "--checkpoint_every=3"],
                          capture_output=True, text=True, timeout=290, cwd=tmp_path,
                          env=dict(env, TF_ENABLE_ONEDNN_OPTS="0"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "mIoU" in proc.stdout, proc.stdout[-3000:]
    # It names its device, says where it writes and what to do next, and prints no
    # TensorFlow start-up line.
    assert proc.stdout.startswith("device: CPU (") or proc.stdout.startswith("device: GPU:0 (")
    assert proc.stdout.count("device: ") == 1, proc.stdout[:2000]
    assert f"TensorBoard logs in {run}" in proc.stdout and "\nnext:\n" in proc.stdout
    for start_up in ("absl::InitializeLog", "oneDNN", "cpu_feature_guard"):
        assert start_up not in proc.stderr, proc.stderr[-2000:]
    assert len(list(data.glob("leftImg8bit/train/*/*.png"))) == 40
    result = json.loads((run / "eval" / "whole.json").read_text())
    assert result["step"] == 3 and result["images"] == 10 and 0 <= result["miou"] <= 1


def test_a_signal_that_reaches_the_command_after_a_write_ends_it_as_the_signal_would(
        tmp_path):
    """A SIGTERM between the end of a write's block and its cleanup surfaces as
    tfseg.io.outputs.Interrupted at the command's top (a real process: the command
    ends itself by the signal): it ends by SIGTERM, with no traceback, and the write's
    staging folder is removed."""
    script = f"""
import sys
from tfseg.cli import main, modes
from tfseg.io import outputs

def write_then_signal(config):
    with outputs.staged({str(tmp_path)!r}) as stage:
        open(stage.path("a.txt"), "w").write("new")
    raise outputs.Interrupted("SIGTERM")  # as if the handler fired just after the block

modes.MODES["validate"] = write_then_signal
sys.argv = ["tfseg", "--mode=validate"]
main.run()
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == -15 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert [n for n in os.listdir(tmp_path) if n.startswith(".tfseg-staging-")] == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("when", ["atexit", "finalization"])
def test_a_signal_in_the_teardown_after_a_finished_mode_ends_it_quietly(sig, when):
    """Ctrl-C or SIGTERM in the moments after a mode finished and reported. From an atexit
    callback it printed a KeyboardInterrupt traceback; from Python's finalization, where
    the default handlers are back and TensorFlow's runtime is torn down (1-2 s, ~11 s on a
    loaded machine), it killed the finished run: exit 143 or 130. The run is done: exit
    0, nothing on stderr, what it printed kept."""
    script = f"""
import atexit, os, sys
from tfseg.cli import main

class Late:
    def __del__(self):  # runs while Python destroys the modules, after its signal handling
        os.kill(os.getpid(), {int(sig)})

late = Late()
atexit.register(lambda: os.kill(os.getpid(), {int(sig)}) if {when == "atexit"} else None)
sys.argv = ["tfseg", "--mode=validate"]
main.run()
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr[-2000:]
    assert json.loads(proc.stdout)["run"]["mode"] == "validate"


def test_an_error_exit_keeps_its_code_through_the_teardown():
    """A usage error ends the process at once with its exit 2 too: a signal in the
    teardown no longer turns it into 143."""
    script = """
import os, signal, sys
from tfseg.cli import main

class Late:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)

late = Late()
sys.argv = ["tfseg", "--mode=validate", "--train_steps=2.5"]
main.run()
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        "tfseg: error: --train_steps: must be an integer, got '2.5'"]


def test_a_non_ascii_path_on_an_ascii_stdout_is_escaped_not_a_crash(tmp_path):
    """With an ASCII stdout (``PYTHONIOENCODING=ascii``, a C locale), a line naming a path
    such as ``ünï 数据`` raised UnicodeEncodeError, exit 1 (a real process: the command's
    entry sets its streams up). The character is escaped (``\\xfc``), the run goes on."""
    from tfseg.data import write_synthetic_cityscapes

    data = write_synthetic_cityscapes(str(tmp_path / "data"), num_train=2, num_val=1,
                                      height=32, width=48)
    out = tmp_path / "ünï 数据"
    proc = subprocess.run([sys.executable, cli.MAIN, "--mode=convert", "--dataset=cityscapes",
                           f"--data_dir={data}", f"--tfrecord_dir={out}"],
                          capture_output=True, timeout=180, cwd=ROOT,
                          env=dict(cli.main_env(), PYTHONIOENCODING="ascii"))
    stdout, stderr = proc.stdout.decode("ascii"), proc.stderr.decode("ascii")
    assert proc.returncode == 0 and "Traceback" not in stderr, stderr[-2000:]
    escaped = str(out).encode("ascii", "backslashreplace").decode("ascii")
    assert f"val: 1 pairs -> 1 shards in {escaped} " in stdout, stdout
    assert {"train.json", "val.json"} <= set(os.listdir(out))
