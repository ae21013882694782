"""The command line: flagfiles parse, bad input is one line on stderr and exit code 2."""

import glob
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGFILES = sorted(glob.glob(os.path.join(ROOT, "flags", "*.flags")))


def _main(*args, timeout=120):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, os.path.join(ROOT, "main.py"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_there_are_flagfiles():
    names = {os.path.basename(f) for f in FLAGFILES}
    assert {"synthetic.flags", "cityscapes_xception65_os16_fullres.flags",
            "cityscapes_xception65_os16_crop769.flags", "voc_xception65_os16.flags",
            "camvid.flags"} <= names


@pytest.mark.parametrize("flagfile", FLAGFILES, ids=os.path.basename)
def test_flagfile_parses_and_documents_itself(flagfile):
    lines = open(flagfile).read().splitlines()
    assert lines[0].startswith("# ") and any("python main.py" in line for line in lines)
    assert any(line.startswith("# Expected") for line in lines)
    proc = _main(f"--flagfile={flagfile}", "--mode=validate")
    assert proc.returncode == 0, proc.stderr
    config = json.loads(proc.stdout)
    assert config["mode"] == "validate"


def test_synthetic_flagfile_is_the_default():
    default = json.loads(_main("--mode=validate").stdout)
    from_file = json.loads(_main(f"--flagfile={ROOT}/flags/synthetic.flags",
                                 "--mode=validate").stdout)
    assert default == from_file


def test_fullres_flagfile_is_batch_1_group_norm_memory_saving():
    config = json.loads(_main(f"--flagfile={ROOT}/flags/cityscapes_xception65_os16_fullres.flags",
                              "--mode=validate").stdout)
    assert config["crop_size"] == [1024, 2048] and config["batch_size"] == 1
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
}


@pytest.mark.parametrize("args,names", BAD.values(), ids=BAD.keys())
def test_bad_flags_exit_2_with_one_line(args, names):
    proc = _main(*args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("main.py: error:"), proc.stderr
    assert names in lines[0]


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_missing_data_dir_exits_2_naming_it(tmp_path, mode):
    missing = tmp_path / "no_such_dir"
    proc = _main(f"--mode={mode}", "--dataset=cityscapes", f"--data_dir={missing}",
                 f"--model_dir={tmp_path / 'run'}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = [line for line in proc.stderr.strip().splitlines() if line.startswith("main.py")]
    assert len(last) == 1 and ("no_such_dir" in last[0] or "--model_dir" in last[0]), proc.stderr
