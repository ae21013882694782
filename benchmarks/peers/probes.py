"""What torch_deeplab.py measures beside the step: the parameter count against tfseg's,
and GPU busy % by NVML. torch_model is imported only when counting (torch, timm).

    import probes                                    # beside this file
    probes.params_line(21)   # {"kind": "params", "torch": {...}, "tfseg": {...}, "ratio": 1.0}
    with probes.Busy() as busy: ...                  # busy.mean(): mean GPU:0 %, None without NVML
"""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import gpu_child  # noqa: E402  (benchmarks/, not a package; its imports are the stdlib's)
# tfseg's DeepLabv3+ (Xception-65, 21 classes) as Keras' count_params gives it, BN
# statistics included: the recorded figure, where tfseg cannot be built here.
RECORDED_TFSEG_PARAMS = 41.26e6
# tfseg's parts of the same network, in a CPU-only process (no TF start-up on the GPU).
TFSEG_COUNT = """
import json, collections
from tfseg.models.deeplab import deeplab_v3_plus, part_of
m = deeplab_v3_plus({classes}, width_multiplier=1.0, middle_repeats=16)
parts = collections.Counter()
for layer in m.layers:
    parts[part_of(layer.name, 16) or "other"] += sum(
        int(w.numpy().size) for w in layer.trainable_weights)
print(json.dumps({{"all_weights": m.count_params(), "total": sum(parts.values()), "parts": parts}}))
"""


def tfseg_params(classes):
    """tfseg's {"total", "parts", "source"}; the recorded figure where tfseg won't build."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    errors = []
    for python in dict.fromkeys([sys.executable, os.path.join(ROOT, ".venv", "bin", "python")]):
        try:
            proc = subprocess.run([python, "-c", TFSEG_COUNT.format(classes=classes)], cwd=ROOT,
                                  env=env, capture_output=True, text=True, timeout=300)
            if proc.returncode == 0:
                return dict(json.loads(proc.stdout.splitlines()[-1]), source=python)
            errors.append((proc.stderr.strip().splitlines() or ["no output"])[-1])
        except (OSError, subprocess.TimeoutExpired) as e:
            errors.append(str(e))
    return {"all_weights": RECORDED_TFSEG_PARAMS, "total": None, "parts": None,
            "source": f"the recorded figure (tfseg not built here: {errors[0]})"}


def params_line(classes):
    import torch_model  # beside this file

    ours, theirs = torch_model.parts(torch_model.DeepLabV3Plus(classes)), tfseg_params(classes)
    if theirs["total"]:  # trainable against trainable
        ratio = ours["total"] / theirs["total"]
    else:  # the recorded figure is Keras' count_params: BN statistics included
        ratio = (ours["total"] + ours["norm_statistics"]) / theirs["all_weights"]
    line = {"kind": "params", "torch": ours, "tfseg": theirs, "ratio": round(ratio, 4),
            "agree_within_2_percent": abs(ratio - 1) <= 0.02}
    if theirs["parts"]:
        p = theirs["parts"]
        tf_backbone = sum(p.get(k, 0) for k in ("entry_flow", "middle_flow", "exit_flow"))
        line["difference"] = {"backbone": ours["backbone"] - tf_backbone,
                              "aspp": ours["aspp"] - p.get("aspp", 0),
                              "decoder": ours["decoder"] - p.get("decoder", 0)}
    if not line["agree_within_2_percent"]:
        line["why"] = ("the networks differ by more than 2%: see `difference` (torch minus "
                       "tfseg, by part); timm's xception65 is the backbone as timm builds it")
    return line


# GPU:0's utilisation %, sampled by NVML every 50 ms while entered (`.mean()`, None
# without NVML): gpu.py's own sampler, so that both sides of the comparison read it alike.
Busy = gpu_child.Utilisation
