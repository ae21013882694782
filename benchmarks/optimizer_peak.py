"""The peak of one plain Keras training step whose weights dwarf its activations, with
and without SGD momentum: how much of a small-input step's peak is the optimizer's.

Keras' `SGD(momentum=m)` makes `m * momentum` for each weight as soon as the step starts
(it needs no gradient) and holds it until that weight's gradient arrives, so a step
holds about a copy of the weights beside the gradients. docs/benchmarks.md ("InceptionV3
and NASNetMobile") quotes it; tfseg's own step applies its update after its finite
check, where none of it runs early.

    TF_ENABLE_ONEDNN_OPTS=1 python benchmarks/optimizer_peak.py

Each variant runs in a fresh process with the allocator recipe of
`tfseg/profile/measure.py` (a warm-up step, `gc.collect()`, base, reset, one step);
prints one JSON line.
"""

import argparse
import json
import os
import subprocess
import sys

import refusal  # beside this file
from tfseg.units import MIB


def child(momentum, width=2048, depth=4, batch=8):
    import gc

    import keras
    import tensorflow as tf

    from tfseg.runtime import device

    model = keras.Sequential([keras.Input((width,))] + [
        keras.layers.Dense(width, use_bias=False) for _ in range(depth)])
    optimizer = keras.optimizers.SGD(0.01, momentum=momentum)
    x = tf.random.uniform((batch, width))

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    step(x)
    gc.collect()
    base = device.memory_info()["current"]
    device.reset_peak()
    step(x)
    weights = sum(v.numpy().nbytes for v in model.trainable_variables)
    return {"momentum": momentum, "weights_mib": weights / MIB,
            "peak_over_base_mib": (device.memory_info()["peak"] - base) / MIB}


def main(argv=None):
    parser = refusal.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--momentum", type=float, default=0.9,
                        help="the SGD momentum measured beside none")
    parser.add_argument("--child", type=float, help=argparse.SUPPRESS)  # one measuring process
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child)))
        return
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1", TF_CPP_MIN_LOG_LEVEL="3")
    rows = [json.loads(subprocess.run(
        [sys.executable, __file__, f"--child={m}"], env=env, check=True, capture_output=True,
        text=True).stdout.splitlines()[-1]) for m in (0.0, args.momentum)]
    print(json.dumps({"benchmark": "optimizer_peak", "rows": rows}))


if __name__ == "__main__":
    sys.path.insert(0, refusal.ROOT)
    main()
