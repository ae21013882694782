"""main.py --backbone: a keras.applications ResNet-50 DeepLabv3+ trained with
--memory_saving, then evaluated from its config.json alone; bad --backbone,
--backbone_weights and --init_checkpoint in one line."""

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from tests.models.test_research_deeplab import write_tf1_checkpoint
from tests.train.conftest import checkpoint_steps, run_main

FLAGS = ("--dataset=cityscapes", "--batch_size=2", "--warmup_steps=0", "--log_every=1",
         "--learning_rate=0.01", "--seed=0")
# Output stride 16: conv5 dilated, its memory-saving twins' backward on the CPU.
RESNET = ("--backbone=resnet50", "--output_stride=16", "--width_multiplier=0.125",
          "--crop_size=33,65")


@pytest.mark.slow
def test_resnet50_trains_with_memory_saving_and_evaluates_from_its_config(data_dir, tmp_path):
    model_dir = tmp_path / "run"
    proc = run_main("--mode=train", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
                    "--memory_saving", "--train_steps=2", "--checkpoint_every=1", *RESNET,
                    *FLAGS, timeout=300)
    # ResNet-50 without its classifier has 23.6M parameters; the head at width 0.125 ~0.1M.
    parameters = int(re.search(r"deeplab_v3_plus: ([\d,]+) parameters", proc.stdout)
                     .group(1).replace(",", ""))
    assert 23_587_712 < parameters < 24_100_000, proc.stdout
    assert checkpoint_steps(model_dir) == [1, 2]
    saved = dict(tf.train.list_variables(str(model_dir / "ckpt-2")))
    assert "weights/conv5_block3_3_conv.Skernel/.ATTRIBUTES/VARIABLE_VALUE" in saved
    model = json.load(open(model_dir / "config.json"))["model"]
    assert (model["backbone"], model["memory_saving"]) == ("resnet50", True)
    # No --backbone: the run's config.json says which model the checkpoint is.
    proc = run_main("--mode=eval", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
                    "--dataset=cityscapes", timeout=300)
    assert f"settings from {model_dir}/config.json: {{'backbone': 'resnet50'" in proc.stdout
    result = json.load(open(model_dir / "eval" / "whole.json"))
    assert result["step"] == 2 and result["images"] == 2
    assert 0.0 <= result["miou"] <= 1.0 and np.isfinite(result["miou"])


def test_a_bad_backbone_its_weights_or_an_xception_checkpoint_exit_2_in_one_line(
        data_dir, tmp_path):
    research = write_tf1_checkpoint(tmp_path / "model.ckpt", {
        "xception_65/entry_flow/conv1_1/weights": np.zeros((3, 3, 3, 8), "float32")})
    missing = "/missing.weights.h5"
    train = ("--mode=train", f"--data_dir={data_dir}", f"--model_dir={tmp_path / 'run'}")
    cases = {
        ("--backbone=nope",): "--backbone: must be one of xception65, resnet50, ",
        (*train, "--backbone=resnet50", f"--backbone_weights={missing}"):
            f"backbone weights {missing}: no such file",
        (*train, "--backbone=mobilenetv2", f"--init_checkpoint={research}"):
            f"--init_checkpoint: {research} is a research/deeplab xception_65 checkpoint",
    }
    for args, line in cases.items():
        proc = run_main(*args, *FLAGS, check=False)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
        assert lines[0].startswith(f"tfseg: error: {line}"), lines[0]
    assert not os.path.exists(tmp_path / "run" / "checkpoint")
