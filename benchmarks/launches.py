"""What a training step costs the host: executed ops, XLA compilations and start-up, by
`--jit_compile`, each row a fresh process.

    python benchmarks/launches.py                          # the full model, 129x129, batch 2
    python benchmarks/launches.py --rows off blocks blocks_cached
    python benchmarks/launches.py --width_multiplier=0.25 --middle_repeats=1   # a minute

Each row's process builds the step as `--mode=train` does (`tfseg.training.loop.
build_step`: memory saving by default, `--variant=stock` for Keras' layers), runs a
first step (trace, compile, run), a second, and a third under TensorFlow's profiler.
Per row:

- `ops`: the ops TensorFlow's executor ran in the profiled step (`tfseg.profile.timeline`:
  an XLA computation's launch is one op, as it is to the executor);
- `compilations`: the XLA modules compiled in the process (one file each in a dump
  folder, `--xla_dump_to`), and how many of them are the middle unit's;
- `first_step_s`: building, tracing, compiling and running the first step;
  `step_s`: the second step; `process_s`: the whole process, Python's start to its exit;
- `blocks_cached` runs `blocks` a second time with the compilation cache the first left
  (`--compile_cache_dir`, a fresh folder per invocation).

On a CPU XLA's code is slower than oneDNN's, so `step_s` says nothing about a GPU; the
host's share of a GPU step is what `ops` predicts. Prints a table and a last JSON line.
"""

import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import refusal  # beside this file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

ROWS = {"off": "off", "step": "step", "blocks": "blocks", "blocks_cached": "blocks"}


def child(spec):
    """One row, in this (fresh) process: prints its JSON."""
    from tfseg.runtime import xla_cache

    if spec["jit_compile"] != "off":  # before TensorFlow reads XLA's flags, as the command
        xla_cache.use(spec["cache"], log=lambda line: None)
    import tensorflow as tf

    from tfseg.config import Config
    from tfseg.profile.timeline import profile
    from tfseg.runtime import builders
    from tfseg.training.loop import build_step

    start = time.perf_counter()
    config = Config.from_flat(
        width_multiplier=spec["width_multiplier"], middle_repeats=spec["middle_repeats"],
        memory_saving=spec["variant"] != "stock", jit_compile=spec["jit_compile"],
        crop_size=spec["size"], batch_size=spec["batch"],
        dataset="cityscapes")
    strategy = builders.strategy(config)
    _, _, _, train_step = build_step(
        config, strategy, lambda norm: builders.model(config, 19, norm, training=True), "batch")
    shape = (spec["batch"], *spec["size"])
    images = tf.cast(tf.random.stateless_uniform(shape + (3,), (0, 1), 0, 255), tf.uint8)
    labels = tf.random.stateless_uniform(shape, (0, 2), 0, 19, dtype=tf.int32)
    float(train_step((images, labels))[0])
    first = time.perf_counter() - start
    start = time.perf_counter()
    float(train_step((images, labels))[0])
    step = time.perf_counter() - start
    summary = profile(lambda: float(train_step((images, labels))[0]),
                      tempfile.mkdtemp(prefix="tfseg_launches_"))
    print(json.dumps({"first_step_s": first, "step_s": step, "ops": summary["host"]["ops"]}))


def run_row(name, args, cache):
    """A row's figures, from a fresh process; `blocks` and `blocks_cached` share `cache`
    (any other row compiles with none)."""
    dump = tempfile.mkdtemp(prefix="tfseg_xla_dump_")
    spec = dict(vars(args), jit_compile=ROWS[name], size=tuple(args.size),
                cache=cache if name.startswith("blocks") else "off")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", XLA_FLAGS=f"--xla_dump_to={dump}")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], env=env,
                          capture_output=True, text=True)
    process = time.perf_counter() - start
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1:]}
    modules = glob.glob(os.path.join(dump, "*.before_optimizations.txt"))
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    return {**row, "process_s": process, "compilations": len(modules),
            "middle_unit_compilations": sum("middle_unit" in m for m in modules)}


def main(argv=None):
    parser = refusal.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", choices=list(ROWS),
                        default=["off", "blocks", "blocks_cached"])
    parser.add_argument("--variant", choices=["stock", "memory_saving"],
                        default="memory_saving")
    parser.add_argument("--width_multiplier", type=float, default=1.0)
    parser.add_argument("--middle_repeats", type=int, default=16)
    parser.add_argument("--size", type=int, nargs=2, default=(129, 129))
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--child")
    args = parser.parse_args(argv)
    if args.child:
        return child(json.loads(args.child))
    cache = tempfile.mkdtemp(prefix="tfseg_compile_cache_")
    results = {name: run_row(name, args, cache) for name in args.rows}
    print(f"{'row':<16}{'ops':>8}{'compiled':>10}{'middle':>8}{'first s':>10}"
          f"{'step s':>9}{'process s':>11}")
    for name, r in results.items():
        if "error" in r:
            print(f"{name:<16}failed: {r['error']}")
            continue
        print(f"{name:<16}{r['ops']:>8,}{r['compilations']:>10}"
              f"{r['middle_unit_compilations']:>8}{r['first_step_s']:>10.1f}"
              f"{r['step_s']:>9.2f}{r['process_s']:>11.1f}")
    print(json.dumps({"launches": results, "settings": {
        k: v for k, v in vars(args).items() if k != "child"}}))


if __name__ == "__main__":
    main()
