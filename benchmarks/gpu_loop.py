"""The training loop as a user runs it, timed on a GPU: `tfseg --mode=train` end to end
(PNG files -> tf.data -> prefetch to the device -> step), not the step alone.

    python benchmarks/gpu_loop.py                          # on a GPU: both runs, gpu_loop.jsonl
    python benchmarks/gpu_loop.py --step_seconds fullres=0.21 --runs fullres
    python benchmarks/gpu_loop.py --cpu                    # every piece at tiny shapes

Writes a synthetic Cityscapes-layout set (tfseg's writer, several processes, kept in
--data_dir), then runs recipes `cityscapes_xception65_os16_fullres` (memory saving, full
Xception-65, 1024x2048 b1, 60 steps) and `..._crop769` (769x769 b8, 30 steps) as `python
main.py --mode=train`, each in a fresh process and model_dir. Per run, one JSON line on
stdout, appended to --out as the run ends: the loop's images/s after the first --skip steps
(wall times of the run's TensorBoard events), the progress line's figure, GPU busy % (NVML
during the counted steps; null without it), CPU use of the run's process tree and of the
machine, and with --step_seconds (benchmarks/gpu.py's) loop/step. Without a GPU (and
without --cpu) it exits 2 with one line.
"""

import glob
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time

import loop_sampler  # beside this file
import refusal  # beside this file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAIN = os.path.join(ROOT, "main.py")
# (name, recipe, crop HxW (None: the images' --size), batch, steps, log_every): the GPU's
# runs and the dry run's.
RUNS = (("fullres", "cityscapes_xception65_os16_fullres", None, 1, 60, 5),
        ("crop769", "cityscapes_xception65_os16_crop769", (769, 769), 8, 30, 5))
CPU_RUNS = (("fullres", "cityscapes_xception65_os16_fullres", None, 1, 6, 1),
            ("crop769", "cityscapes_xception65_os16_crop769", (65, 65), 2, 6, 1))
# The recipes' network is the full one (width 1, 16 middle units); the dry run's is tiny.
CPU_MODEL = ("--width_multiplier=0.125", "--middle_repeats=1")
MARKER = "gpu_loop_set.json"


def _write_part(job):
    from tfseg.data.synthetic import write_synthetic_cityscapes

    root, part, count, val, height, width = job
    return write_synthetic_cityscapes(root, num_train=count, num_val=val, height=height,
                                      width=width, seed=part)


def write_set(root, images, height, width, processes, timeout):
    """A Cityscapes-layout set of `images` train PNGs (and one val) of height x width under
    `root`, written by tfseg's writer in `processes` parts (each its own seed, moved in as
    cities "pNN_synthK"); kept and reused when complete. Returns seconds spent writing.
    Raises multiprocessing.TimeoutError after `timeout` seconds."""
    params = dict(images=images, height=height, width=width)
    marker = os.path.join(root, MARKER)
    if os.path.isfile(marker) and json.load(open(marker)) == params:
        return 0.0
    start = time.monotonic()
    shutil.rmtree(root, ignore_errors=True)
    parts = max(1, min(processes, images))
    staging = tempfile.mkdtemp(prefix=".gpu_loop-", dir=os.path.dirname(os.path.abspath(root)))
    jobs = [(os.path.join(staging, f"p{p:02d}"), p, images // parts + (p < images % parts),
             int(p == 0), height, width) for p in range(parts)]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # the writers' TF start-up lines
    # spawn: the parent holds TensorFlow's threads, which a fork would copy mid-state.
    with multiprocessing.get_context("spawn").Pool(parts) as pool:
        pool.map_async(_write_part, jobs).get(timeout)
    for part_root, part, *_ in jobs:
        for top in ("leftImg8bit", "gtFine"):
            for split in ("train", "val"):
                os.makedirs(os.path.join(staging, top, split), exist_ok=True)
                for city in os.listdir(os.path.join(part_root, top, split)):
                    os.rename(os.path.join(part_root, top, split, city),
                              os.path.join(staging, top, split, f"p{part:02d}_{city}"))
        shutil.rmtree(part_root)
    with open(os.path.join(staging, MARKER), "w") as f:
        json.dump(params, f)
    os.rename(staging, root)
    return time.monotonic() - start


def read_events(model_dir):
    """{step: {"wall": wall time, tag: value}} of the loss and images/s the loop logged."""
    import tensorflow as tf
    from tensorflow.core.util import event_pb2

    out = {}
    for path in sorted(glob.glob(os.path.join(model_dir, "train", "events.out.tfevents.*"))):
        for record in tf.data.TFRecordDataset(path):
            event = event_pb2.Event.FromString(record.numpy())
            for value in event.summary.value:
                if value.tag in ("loss", "images_per_second"):
                    number = (float(tf.make_ndarray(value.tensor)) if value.HasField("tensor")
                              else value.simple_value)
                    out.setdefault(event.step, {"wall": event.wall_time})[value.tag] = number
    return out


def run_one(args, spec, data_dir, deadline):
    """One `main.py --mode=train` process, measured: the run's JSON dict."""
    name, recipe, crop, batch, steps, log_every = spec
    height, width = crop or args.data["size"]
    model_dir = tempfile.mkdtemp(prefix=f"gpu_loop_{name}_")
    command = [sys.executable, MAIN, f"--recipe={recipe}", "--mode=train",
               f"--data_dir={data_dir}", f"--model_dir={model_dir}",
               f"--crop_size={height},{width}", f"--batch_size={batch}",
               f"--train_steps={steps}", f"--warmup_steps={steps - 1}",  # < train_steps
               f"--log_every={log_every}", "--checkpoint_every=1000000", "--keep_checkpoints=1",
               *(CPU_MODEL if args.cpu else ()), *args.flag]
    result = {"benchmark": "gpu_loop", "run": name, "card": args.card, "dry_run": args.cpu,
              "recipe": recipe, "crop": [height, width], "batch": batch, "steps": steps,
              "log_every": log_every, "skip": args.skip, "data": args.data,
              "command": " ".join(["python main.py"] + command[2:])}
    timeout, began = min(args.run_timeout, deadline - time.monotonic()), time.monotonic()
    log_path = os.path.join(model_dir, "gpu_loop.log")
    try:
        with open(log_path, "w") as log:
            proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                    env=dict(os.environ, PYTHONUNBUFFERED="1"))
            sampler = loop_sampler.Sampler(proc.pid)
            sampler.start()
            try:
                result["exit"] = proc.wait(timeout=max(timeout, 1))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                result["error"] = f"timed out after {timeout:.0f} s"
            sampler.stop.set()
            sampler.join()
        result["process_seconds"] = time.monotonic() - began
        lines = open(log_path).read().splitlines()
        result["last_line"] = lines[-1] if lines else ""
        if result.get("exit"):
            result["error"] = f"exit {result['exit']}: {result['last_line']}"
        events = read_events(model_dir)
        counted = sorted(s for s in events if s >= args.skip)
        if len(counted) < 2:
            result.setdefault("error", f"fewer than 2 log steps at or after step {args.skip}")
            return result
        first, last = events[counted[0]], events[counted[-1]]
        seconds = last["wall"] - first["wall"]
        result.update(counted_steps=counted[-1] - counted[0], counted_seconds=seconds,
                      images_per_s=(counted[-1] - counted[0]) * batch / seconds,
                      loss=last.get("loss"), **sampler.window(first["wall"], last["wall"]))
        rates = sorted(events[s]["images_per_second"] for s in counted[1:])
        result["progress_images_per_s"] = rates[len(rates) // 2]
        step_seconds = args.step_seconds.get(name)
        if step_seconds:
            result.update(step_seconds=step_seconds, step_images_per_s=batch / step_seconds,
                          loop_over_step=result["images_per_s"] * step_seconds / batch)
        return result
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)


def main(argv=None):
    parser = refusal.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="dry run at tiny shapes on the CPU")
    parser.add_argument("--runs", nargs="*", choices=("fullres", "crop769"), help="(both)")
    parser.add_argument("--images", type=int, default=None, help="train images (64; --cpu 8)")
    parser.add_argument("--size", default=None, help="HxW of the images (1024x2048; --cpu 97x129)")
    parser.add_argument("--processes", type=int, default=os.cpu_count(), help="writers")
    parser.add_argument("--data_dir", help="the set's folder, reused (default: in the temp dir)")
    parser.add_argument("--skip", type=int, default=None,
                        help="steps not counted: start-up and tracing (10; --cpu 2)")
    parser.add_argument("--step_seconds", nargs="*", default=[],
                        help="NAME=SECONDS: benchmarks/gpu.py's step time of that run's shape")
    parser.add_argument("--flag", action="append", default=[],
                        help="one more flag for main.py, e.g. --flag=--jit_compile (repeatable)")
    parser.add_argument("--run_timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--max_seconds", type=float, default=1500.0, help="the whole script's")
    parser.add_argument("--out", default="gpu_loop.jsonl", help="JSON lines appended here")
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.max_seconds
    try:
        args.step_seconds = {k: float(v) for k, v in (s.split("=") for s in args.step_seconds)}
        height, width = map(int, (args.size or ("97x129" if args.cpu else "1024x2048")).split("x"))
    except ValueError:
        refusal.refuse("--step_seconds takes NAME=SECONDS, --size HxW")
    specs = [s for s in (CPU_RUNS if args.cpu else RUNS) if s[0] in (args.runs or s[0])]
    args.skip = args.skip if args.skip is not None else (2 if args.cpu else 10)
    images = args.images or (8 if args.cpu else 64)
    if args.cpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = "-1"  # the dry run is the CPU's, GPU or not
    device_line = refusal.quiet_tensorflow()
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not args.cpu and not gpus:
        refusal.refuse(f"no GPU here, {device_line}; --cpu runs every piece at tiny shapes "
                       f"on the CPU")
    args.card = (tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
                 if gpus else "CPU (dry run, tiny shapes)")
    # This process reads the runs' event files with TensorFlow ops: on the GPU they would
    # take its memory from the next run (on an H200 the 769x769 run ran out, 2026-11-28).
    tf.config.set_visible_devices([], "GPU")
    data_dir = args.data_dir or os.path.join(tempfile.gettempdir(),
                                             f"tfseg_gpu_loop_{images}_{height}x{width}")
    try:
        write_seconds = write_set(data_dir, images, height, width, args.processes,
                                  deadline - time.monotonic())
    except multiprocessing.TimeoutError:
        print(f"writing {data_dir} passed --max_seconds", file=sys.stderr)
        return 1
    args.data = {"dir": data_dir, "images": images, "size": [height, width],
                 "write_seconds": write_seconds, "processes": args.processes}
    print(f"{args.card}: {images} images of {height}x{width} in {data_dir} "
          f"({write_seconds:.0f} s to write)", file=sys.stderr, flush=True)
    failed = 0
    for spec in specs:
        if deadline - time.monotonic() < 30:
            result = {"benchmark": "gpu_loop", "run": spec[0],
                      "error": f"not started: --max_seconds={args.max_seconds:g}"}
        else:
            result = run_one(args, spec, data_dir, deadline)
        failed += "error" in result
        line = json.dumps(result)
        print(line, flush=True)
        with open(args.out, "a") as f:  # per run: a later kill keeps the runs that ended
            f.write(line + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
