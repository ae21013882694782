"""tfseg on a GPU in one command: the figures no CPU can give.

    python benchmarks/gpu.py                        # on a GPU: --max_minutes (22) and one process
    python benchmarks/gpu.py --rows '1024x2048 b1:stock' memory_saving --parity float64
    python benchmarks/gpu.py --cpu                  # every piece at tiny shapes on the CPU

Measures, each in a fresh process:

- twin parity on the GPU's kernels: one training step's gradients of memory saving and
  recompute against stock's, in float64, in float32 with TF32 off
  (`NVIDIA_TF32_OVERRIDE=0`) and in float32 as TF runs it (TF32 on, on Ampere and later);
- the allocator's peak over base and the step time of stock, memory saving and recompute
  at 513x513 batch 2 and 1024x2048 batch 1, and the `mixed_bfloat16` rows at full
  resolution, in interleaved rounds (stock, memory saving, recompute, stock, ...);
- Grappler's layout optimizer off against on (stock and memory saving, 513x513 b2;
  memory saving in `mixed_bfloat16` at full resolution);
- the depthwise twins' kernels: memory saving with `--depthwise_kernel=grouped` (a
  grouped Conv2D, cuDNN's) against TensorFlow's depthwise kernels;
- the batch-norm twin's two forms, `--fused_norm=true` (TF's fused kernels) and `false`
  (the unfused ops), at 513x513 b2 (`--norm_setting` names another setting; without one
  the A/B is skipped, with a note);
- with `--profile`, where one step's time goes: its kernels' time by op type, how much
  of the step they fill, and the host's op time (`tfseg.profile.timeline`);
- GPU utilisation during the timed steps (NVML) and the device overhead
  (`tfseg.runtime.device`: NVML after TF's start-up with memory growth, and the process's
  memory outside the allocator under a real step).

Writes gpu.json and gpu.md to --out_dir, prints the table and one JSON line. Beside each
row: docs/benchmarks.md's CPU figure and, at full resolution, PaddlePaddle's published
figure on a GTX 1080 Ti (another card). Rounds stop before --max_minutes. Without a GPU
(and without --cpu) it exits 2 with one line.
"""

import datetime
import json
import os
import subprocess
import sys
import time

import gpu_table  # beside this file
import refusal  # beside this file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = os.path.join(ROOT, "benchmarks", "gpu_child.py")
# (label, height, width, batch): the GPU's sizes, and the dry run's stand-ins.
SIZES = (("513x513 b2", 513, 513, 2), ("1024x2048 b1", 1024, 2048, 1))
CPU_SIZES = (("513x513 b2", 33, 49, 2), ("1024x2048 b1", 33, 65, 1))
# The network measured: DeepLabv3+ with the full aligned Xception-65 and 21 classes, as
# benchmarks/memory.py measures it for docs/benchmarks.md's CPU column (tfseg's Config
# default is the small synthetic model); the dry run's stand-in is tiny.
MODEL = dict(num_classes=21, width_multiplier=1.0, middle_repeats=16)
CPU_MODEL = dict(num_classes=21, width_multiplier=0.25, middle_repeats=1)
VARIANT_ROWS = ("stock", "memory_saving", "recompute")
# XLA's GPU command buffers for every kind of thunk they take, however short the graph.
COMMAND_BUFFERS = ("--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,"
                   "CUDNN --xla_gpu_graph_min_graph_size=1")
# The dry run's rows: each kind of piece once (fp32 variants, layout off, bf16; and the
# norm A/B's rows, named SETTING=VALUE).
# (Not memory_saving_grouped: it runs on a GPU only, `tfseg.layers.conv_kernels`.)
CPU_ROWS = {("513x513 b2", "stock"), ("513x513 b2", "memory_saving"),
            ("513x513 b2", "recompute"), ("513x513 b2", "memory_saving_layout_off"),
            ("1024x2048 b1", "recompute_bf16"), ("1024x2048 b1", "memory_saving_xla")}


def _with_xla_flags(env):
    """``env`` with its XLA_FLAGS after the caller's own (set up by the device's tfenv)."""
    if "XLA_FLAGS" not in env:
        return env
    return {**env, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} {env['XLA_FLAGS']}".strip()}


def child(kind, spec, env=None, timeout=1800.0):
    """The JSON line of one fresh `gpu_child.py` process, or {"error": its last line}."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    if kind == "step":  # on the CPU only oneDNN's allocator keeps statistics
        env["TF_ENABLE_ONEDNN_OPTS"] = "1"
    try:
        proc = subprocess.run([sys.executable, CHILD, kind, json.dumps(spec)], env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or "(no output)").splitlines()[-1]
        if lines:  # measured, then the profiled step failed: keep the measurement
            return {**json.loads(lines[-1]), "profile_error": f"exit {proc.returncode}: {tail}"}
        return {"error": f"exit {proc.returncode}: {tail}"}
    return json.loads(lines[-1])


def norm_setting(name):
    """(setting, [values]) of the batch-norm twin's form (fused or not), or None."""
    from tfseg.config import Config

    flat = Config().flat()
    found = [n for n in flat if n == name] or [
        n for n in flat if "norm" in n and ("fused" in n or "kernel" in n)]
    if not found:
        return None
    current = flat[found[0]]
    if isinstance(current, bool):
        return found[0], [not current]
    # A string setting ("auto", "true", "false"): both forms, named outright.
    return found[0], [v for v in ("true", "false") if v != current]


def rows(args):
    """[(size, row name, StepConfig JSON, layout optimizer on?, environment)] in one
    round's order; the environment's XLA_FLAGS are added to the caller's."""
    from tfseg.models.xception import DEFAULT_RECOMPUTE
    from tfseg.profile.step import StepConfig

    out = []
    for label, height, width, batch in (CPU_SIZES if args.cpu else SIZES):
        base = StepConfig.of(height=height, width=width, batch=batch,
                             timed_steps=args.timed_steps, **(CPU_MODEL if args.cpu else MODEL))
        steps = {"stock": base, "memory_saving": base.replace(variant="memory_saving"),
                 "recompute": base.replace(variant="recompute",
                                           recompute_blocks=tuple(DEFAULT_RECOMPUTE))}
        for name in VARIANT_ROWS:
            out.append((label, name, steps[name], True))
        # The twins' depthwise convs as grouped Conv2Ds (cuDNN), against TF's own kernels.
        out.append((label, "memory_saving_grouped",
                    steps["memory_saving"].replace(depthwise_kernel="grouped"), True))
        for name in ("stock", "memory_saving"):  # the whole step compiled by XLA
            out.append((label, f"{name}_xla", steps[name].replace(jit_compile=True), True))
        for name in ("stock", "memory_saving"):  # each block compiled (tfseg.xla.Blocks)
            out.append((label, f"{name}_blocks", steps[name].replace(jit_compile="blocks"),
                        True))
        # XLA's GPU command buffers (CUDA graphs) over every kind of thunk they take, from
        # graphs of one kernel up: the blocks' launches replayed as graphs.
        out.append((label, "memory_saving_blocks_cmdbuf", steps["memory_saving"].replace(
            jit_compile="blocks"), True, {"XLA_FLAGS": COMMAND_BUFFERS}))
        if label.startswith("1024x2048"):
            for name in VARIANT_ROWS:
                out.append((label, f"{name}_bf16",
                            steps[name].replace(dtype_policy="mixed_bfloat16"), True))
            out.append((label, "memory_saving_bf16_xla", steps["memory_saving"].replace(
                dtype_policy="mixed_bfloat16", jit_compile=True), True))
            out.append((label, "memory_saving_bf16_blocks", steps["memory_saving"].replace(
                dtype_policy="mixed_bfloat16", jit_compile="blocks"), True))
            # Grappler turns float32 and bfloat16 training graphs NCHW with transposes.
            out.append((label, "memory_saving_bf16_layout_off", steps["memory_saving"].replace(
                dtype_policy="mixed_bfloat16"), False))
        else:
            for name in ("stock", "memory_saving"):
                out.append((label, f"{name}_layout_off", steps[name], False))
            found = norm_setting(args.norm_setting)
            for value in (found[1] if found else []):
                out.append((label, f"memory_saving_{found[0]}={value}",
                            steps["memory_saving"].replace(**{found[0]: value}), True))
    if args.cpu:  # and one norm row
        norms = [r for r in out if "=" in r[1]][-1:]
        out = [r for r in out if r[:2] in CPU_ROWS] + norms
    if args.rows is not None:  # "SIZE:NAME" or "NAME" (every size), in the order given
        out = [r for want in args.rows for r in out if want in (r[1], f"{r[0]}:{r[1]}")]
    return [(row[0], row[1], row[2].to_json(), row[3], row[4] if len(row) > 4 else {})
            for row in out]


def parity_specs(args):
    """[(spec, env)]: float64, float32 with TF32 off, float32 as TF runs it (on a GPU)."""
    size = dict(size=[33, 49], width_multiplier=0.125, middle_repeats=1) if args.cpu else dict(
        size=[129, 193], width_multiplier=0.5, middle_repeats=4)
    specs = {"float64": ({"dtype": "float64", **size}, {}),
             "float32_tf32_off": ({"dtype": "float32", **size}, {"NVIDIA_TF32_OVERRIDE": "0"}),
             "float32": ({"dtype": "float32", **size}, {})}
    names = args.parity if args.parity is not None else (
        ["float64", "float32_tf32_off"] if args.cpu else list(specs))
    return [specs[n] for n in names]


def overhead():
    """The device overhead: NVML's probe (`tfseg.runtime.device`), 0 on the CPU."""
    from tfseg.errors import InputError
    from tfseg.runtime import device

    try:
        found = device.overhead(-1)
        return {"bytes": found.bytes, "source": found.source}
    except InputError as error:
        return {"bytes": None, "source": str(error)}


def card():
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    return tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")


def run(args, log=print):
    """Every measurement; the summary dict (also written as gpu.json and gpu.md)."""
    start = time.monotonic()
    name = card() or "CPU (dry run, tiny shapes)"
    skipped = []
    found = norm_setting(args.norm_setting)
    if not found:
        skipped.append("fused vs unfused norm A/B: tfseg has no setting for the batch-norm "
                       "twin's form")
    summary = {"benchmark": "gpu", "card": name, "dry_run": args.cpu,
               "date": datetime.date.today().isoformat(),
               "command": "python benchmarks/gpu.py " + " ".join(sys.argv[1:]),
               "model": "DeepLabv3+ Xception-65, width {width_multiplier}, {middle_repeats} "
                        "middle-flow units, {num_classes} classes".format(
                            **(CPU_MODEL if args.cpu else MODEL)),
               "overhead": overhead(), "parity": [], "rows": [], "skipped": skipped}
    log(f"{name}: device overhead {summary['overhead']}", flush=True)
    for spec, env in parity_specs(args):
        result = child("parity", spec, env)
        summary["parity"].append({**spec, **result})
        save(args, summary, [], start)
        log(f"parity {spec['dtype']} {env or ''}: {result}", flush=True)
    table = [{"size": s, "name": n, "step": step, "layout_optimizer": layout, "env": env,
              "runs": []} for s, n, step, layout, env in rows(args)]
    longest = 0.0
    for round_ in range(args.repeats):
        for row in table:
            elapsed = time.monotonic() - start
            if elapsed + longest > args.max_minutes * 60:
                skipped.append(f"round {round_ + 1} of {row['size']} {row['name']}: "
                               f"--max_minutes={args.max_minutes}")
                continue
            if "error" in row:
                continue
            began = time.monotonic()
            result = child("step", {"step": row["step"],
                                    "layout_optimizer": row["layout_optimizer"],
                                    "profile": args.profile and round_ == 0},
                           env=_with_xla_flags(row["env"]),
                           timeout=max(120.0, args.max_minutes * 60 + 180 - elapsed))
            longest = max(longest, time.monotonic() - began)
            if "error" in result:
                row["error"] = result["error"]
            else:
                row["runs"].append(result)
            save(args, summary, table, start)  # a run cut short keeps what it measured
            shown = result.get("error") or (
                f"{result['peak_over_base_bytes'] / gpu_table.MIB:,.0f} MiB over base, "
                f"{result['step_seconds']:.3f} s")
            log(f"round {round_ + 1} {row['size']} {row['name']}: {shown}", flush=True)
    return save(args, summary, table, start)


def save(args, summary, table, start):
    """Writes gpu.json and gpu.md from the rounds so far; the summary written."""
    rows = []
    for row in table:
        result = combine(row["runs"]) if row["runs"] else None
        rows.append({**{k: v for k, v in row.items() if k not in ("runs", "step")},
                     "result": result, "runs": [None] * len(row["runs"])})
    summary = {**summary, "rows": rows, "overhead": dict(summary["overhead"]),
               "minutes": (time.monotonic() - start) / 60}
    under = [r["result"]["outside_allocator_bytes"] for r in rows
             if r["result"] and r["result"].get("outside_allocator_bytes")]
    summary["overhead"]["under_step_bytes"] = max(under) if under else None
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "gpu.json"), "w") as f:
        json.dump(summary, f, indent=2)
    with open(os.path.join(args.out_dir, "gpu.md"), "w") as f:
        f.write(gpu_table.markdown(summary))
    return summary


def combine(runs):
    """One row from its processes: medians of peak, base and step time; the rest the
    first process's."""
    import statistics

    keys = ("peak_over_base_bytes", "base_bytes", "step_seconds")
    out = {**runs[0], **{k: statistics.median(r[k] for r in runs) for k in keys},
           "processes": len(runs), "step_seconds_by_process": [r["step_seconds"] for r in runs],
           # The first step of each fresh process, in order: the first pays the driver's
           # compilation of TF's PTX, later ones read its cache (CUDA_CACHE_PATH).
           "warmup_seconds_by_process": [r["warmup_seconds"] for r in runs]}
    busy = [r["gpu_utilisation_percent"] for r in runs if r["gpu_utilisation_percent"] is not None]
    out["gpu_utilisation_percent"] = statistics.median(busy) if busy else None
    return out


def main(argv=None):
    parser = refusal.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true",
                        help="dry run: every piece at tiny shapes on the CPU")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved rounds")
    parser.add_argument("--timed_steps", type=int, default=None,
                        help="steps timed per process (default 5; --cpu 1)")
    parser.add_argument("--max_minutes", type=float, default=22.0,
                        help="start no process that would end after this")
    parser.add_argument("--norm_setting", default="",
                        help="the setting choosing the batch-norm twin's form")
    parser.add_argument("--rows", nargs="*", default=None,
                        help="only these rows, in this order: NAME (every size) or "
                             "SIZE:NAME, e.g. '1024x2048 b1:stock' memory_saving; none "
                             "given: the parity checks only")
    parser.add_argument("--parity", nargs="*", default=None,
                        choices=("float64", "float32_tf32_off", "float32"),
                        help="which parity checks (default: all three; --cpu: the first two)")
    parser.add_argument("--profile", action="store_true",
                        help="profile one more step of each row's first process: its time "
                             "by op type on the device and the host (tfseg.profile.timeline)")
    parser.add_argument("--out_dir", default="gpu_benchmark")
    args = parser.parse_args(argv)
    args.timed_steps = args.timed_steps or (1 if args.cpu else 5)
    if args.cpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = "-1"  # the dry run is the CPU's, GPU or not
    device_line = refusal.quiet_tensorflow()
    if not args.cpu and card() is None:
        refusal.refuse(f"no GPU here, {device_line}; --cpu runs every piece at tiny shapes "
                       f"on the CPU")
    summary = run(args)
    print(gpu_table.markdown(summary))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
