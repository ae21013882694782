"""The memory rewrite on models a Keras user brings: keras.applications, stock vs rewritten.

For each model (built with `weights=None`), one training step (forward, backward,
momentum SGD update, sparse softmax cross-entropy on its 1,000 classes) is
measured in a fresh process per variant and repeat, with the allocator recipe of
`tfseg/profile/measure.py`: a warm-up step, `gc.collect()`, base = current, reset,
one step, peak - base; the median of the repeats. "rewrite" is
`tfseg.memory.rewrite(model)` with its defaults (output-only norms, activations
fused into the next conv, separable blocks, residual folds). Dropout rates are
zeroed so both variants run the same maths.

    python benchmarks/rewrite.py                       # 224x224, batch 8, 3 repeats
    python benchmarks/rewrite.py --models ResNet50 --repeats 1 --size 160

Prints a table (peak over base, ratio to stock, the issue's target) and one JSON
line. On the CPU, run with TF_ENABLE_ONEDNN_OPTS=1 (set here for the children):
only oneDNN's allocator keeps statistics.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

# Issue 15's targets: rewritten peak over base as a ratio to stock's.
TARGETS = {"MobileNetV2": 0.5, "MobileNetV3Large": 0.5, "MobileNetV3Small": 0.5,
           "EfficientNetB0": 0.5, "ResNet50": 0.6}
MODELS = ("MobileNetV2", "MobileNetV3Large", "EfficientNetB0", "EfficientNetV2B0", "ResNet50",
          "ResNet50V2", "DenseNet121", "Xception")
VARIANTS = ("stock", "rewrite")
MIB = 2**20


def child(name, variant, size, batch):
    """Measures one variant of one model in this (fresh) process; prints a JSON line."""
    import gc
    import time

    import keras
    import numpy as np
    import tensorflow as tf

    from tfseg import memory
    from tfseg.runtime import device

    keras.utils.set_random_seed(0)
    model = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3))
    for layer in model._flatten_layers():
        if isinstance(layer, keras.layers.Dropout):
            layer.rate = 0.0
    if variant == "rewrite":
        model = memory.rewrite(model)
    optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    rng = np.random.RandomState(0)
    images = tf.constant(rng.rand(batch, size, size, 3).astype("float32") * 255)
    labels = tf.constant(rng.randint(0, 1000, batch))

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    float(step(images, labels))  # warm-up: trace, slots, allocator regions
    gc.collect()
    base = device.memory_info()["current"]  # GPU:0 when there is one, else CPU:0
    device.reset_peak()
    start = time.perf_counter()
    float(step(images, labels))
    seconds = time.perf_counter() - start
    peak = device.memory_info()["peak"] - base
    print(json.dumps({"model": name, "variant": variant, "peak_over_base_bytes": int(peak),
                      "step_seconds": seconds, "changes": str(memory.changes(model))
                      if variant == "stock" else None}))


def measure(name, variant, size, batch):
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    out = subprocess.run([sys.executable, __file__, "--child", name, variant, str(size),
                          str(batch)], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        name, variant, size, batch = args.child
        return child(name, variant, int(size), int(batch))
    rows = []
    print(f"{'model':<18} {'stock MiB':>10} {'rewrite MiB':>12} {'ratio':>6} {'target':>7}"
          f"  status", flush=True)
    for name in args.models:
        runs = {v: [] for v in VARIANTS}
        for _ in range(args.repeats):  # interleaved: a slow stretch hits both alike
            for variant in VARIANTS:
                runs[variant].append(measure(name, variant, args.size, args.batch))
        peaks = {v: statistics.median(r["peak_over_base_bytes"] for r in runs[v])
                 for v in VARIANTS}
        times = {v: statistics.median(r["step_seconds"] for r in runs[v]) for v in VARIANTS}
        ratio = peaks["rewrite"] / peaks["stock"]
        target = TARGETS.get(name)
        status = "" if target is None else ("met" if ratio <= target else "missed")
        rows.append({"model": name, "stock_mib": peaks["stock"] / MIB,
                     "rewrite_mib": peaks["rewrite"] / MIB, "ratio": ratio, "target": target,
                     "status": status, "time_ratio": times["rewrite"] / times["stock"],
                     "changes": runs["stock"][0]["changes"]})
        print(f"{name:<18} {peaks['stock'] / MIB:>10.0f} {peaks['rewrite'] / MIB:>12.0f} "
              f"{ratio:>6.2f} {target or '':>7}  {status}", flush=True)
    print(json.dumps({"benchmark": "rewrite", "size": args.size, "batch": args.batch,
                      "repeats": args.repeats, "rows": rows}))


if __name__ == "__main__":
    main()
