"""The split many-class head (--class_devices): one class shard per logical CPU device,
trained as the stock head; no tensor of all the classes at full size, and each shard's
upsampling (forward and backward) on its own device. A fresh process
(tests/split/on_devices.py): TF fixes its logical devices at start."""

import json

import numpy as np
import pytest

from tests.split.test_place import on_devices


@pytest.mark.slow
def test_split_head_trains_as_the_stock_head_and_never_gathers_the_logits():
    proc = on_devices(3, "head")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    stock, split = result["stock"], result["split"]
    assert split["loss"] == pytest.approx(stock["loss"], rel=1e-6)
    assert np.mean(np.array(split["predictions"]) == np.array(stock["predictions"])) > 0.999
    # 13 classes in shards of 4, 4 and 5: the widest full-size tensor is a shard's; the
    # stock head's (the check can fail) has all 13.
    assert stock["widest"] == 13 and split["widest"] == 5
    assert split["resize_devices"] == ["CPU:0", "CPU:1", "CPU:2"]
