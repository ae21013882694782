"""Many classes: the stock head against the chunked head and the split head, and the
model split across devices.

Each variant is one training step of DeepLabv3+ (Xception-65, memory saving, momentum
SGD, tfseg's own step and loss) in a fresh process, measured with the allocator recipe
of `tfseg/profile/measure.py` (a warm-up step, `gc.collect()`, base = current, reset,
one step, peak - base):

  stock:   the 1x1 logits conv and the upsample to full size (`--class_shards=0`);
  chunked: the cross-entropy in `--shards` class shards on one device (`--class_shards`);
  split:   one class shard per device (`--class_devices`, two logical CPU devices here);
  model:   the whole network split across two devices (`--model_devices`), stock head.

    python benchmarks/split.py                        # 1,000 classes, 513x513, batch 2
    python benchmarks/split.py --size 257 --width 0.5 --middle_repeats 4

Prints a table and one JSON line. On the CPU the logical devices share one allocator
(`get_memory_info` has no per-device statistics there), so the split variants' peaks
are the sum over their devices; for `model` the cuts' per-device prediction is
printed too. Run with TF_ENABLE_ONEDNN_OPTS=1 (set here for the children): only oneDNN's
allocator keeps statistics on the CPU.
"""

import json
import os
import subprocess
import sys

import refusal  # beside this file
from tfseg.units import MIB

VARIANTS = ("stock", "chunked", "split", "model")


def child(variant, args):
    """Measures one variant in this (fresh) process; prints a JSON line."""
    import gc
    import time

    refusal.quiet_tensorflow()  # a failure's stderr, shown by the parent, holds no start-up lines
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    # Every variant on the two logical CPUs, a GPU hidden: the measured device is then
    # CPU:0 (tfseg.runtime.device), the one allocator both logical CPUs share.
    tf.config.set_visible_devices([], "GPU")

    import keras
    import numpy as np

    from tfseg import split as split_lib
    from tfseg.models import deeplab_v3_plus
    from tfseg.runtime import device
    from tfseg.split import cuts
    from tfseg.training import losses
    from tfseg.training.step import make_train_step

    keras.utils.set_random_seed(0)
    devices = split_lib.device_names(["CPU:0", "CPU:1"])
    head = {"chunked": dict(class_shards=args.shards), "split": dict(class_devices=devices)}
    model = deeplab_v3_plus(args.classes, output_stride=16, width_multiplier=args.width,
                            middle_repeats=args.middle_repeats, dropout=0.0,
                            memory_saving=True, **head.get(variant, {}))
    loss_fn = losses.for_model(model)
    shape = (args.batch, args.size, args.size)
    predicted = []
    if variant == "model":
        parts = split_lib.parts(model)
        kept = cuts.kept_by_layer(model, tf.TensorSpec(shape + (3,)),
                                  tf.TensorSpec(shape, tf.int32), loss_fn)
        loads = cuts.balance(cuts.part_costs(parts, kept, slots=1), devices)
        predicted = [dict(device=load.device, parts=load.parts, peak_bytes=load.peak)
                     for load in loads]
        model = split_lib.place(model, parts, cuts.assignment(loads))
    optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
    optimizer.build(model.trainable_variables)
    step = make_train_step(tf.distribute.get_strategy(), model, optimizer, loss_fn,
                           tf.Variable(0, dtype=tf.int64))
    rng = np.random.default_rng(0)
    batch = (tf.constant(rng.integers(0, 256, shape + (3,)).astype("uint8")),
             tf.constant(rng.integers(0, args.classes, shape).astype("int32")))
    step(batch)[0].numpy()
    gc.collect()
    base = device.memory_info()["current"]
    device.reset_peak()
    start = time.perf_counter()
    loss = float(step(batch)[0])
    seconds = time.perf_counter() - start
    peak = device.memory_info()["peak"] - base
    print(json.dumps({"variant": variant, "peak_over_base_bytes": int(peak),
                      "step_seconds": seconds, "loss": loss, "predicted_per_device": predicted}))


def measure(variant, args):
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1", TF_CPP_MIN_LOG_LEVEL="3")
    argv = [sys.executable, __file__, "--child", variant] + [
        f"--{k}={v}" for k, v in vars(args).items() if k not in ("child", "variants")]
    out = subprocess.run(argv, env=env, capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if out.returncode:
        raise SystemExit(f"{variant}: exit {out.returncode}\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = refusal.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--size", type=int, default=513)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--width", type=float, default=1.0)
    parser.add_argument("--middle_repeats", type=int, default=16)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--child", choices=VARIANTS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child, args)
    rows = {variant: measure(variant, args) for variant in args.variants}
    stock = rows.get("stock")
    print(f"{'variant':<10}{'peak MiB':>12}{'vs stock':>10}{'step s':>10}{'loss':>10}")
    for variant, row in rows.items():
        ratio = row["peak_over_base_bytes"] / stock["peak_over_base_bytes"] if stock else 0
        print(f"{variant:<10}{row['peak_over_base_bytes'] / MIB:>12,.1f}{ratio:>10.2f}"
              f"{row['step_seconds']:>10.2f}{row['loss']:>10.4f}")
        for device in row["predicted_per_device"]:
            print(f"{'':<10}predicted {device['device']}: {device['parts']} parts, "
                  f"{device['peak_bytes'] / MIB:,.1f} MiB")
    print(json.dumps({"benchmark": "split", "classes": args.classes, "size": args.size,
                      "batch": args.batch, "width": args.width,
                      "middle_repeats": args.middle_repeats, "shards": args.shards,
                      "rows": rows}))


if __name__ == "__main__":
    main()
