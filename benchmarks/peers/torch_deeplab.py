"""A PyTorch DeepLabv3+ timed as tfseg is timed: the peer for benchmarks/gpu.py's rows.

    python benchmarks/peers/torch_deeplab.py                     # on a GPU: every default row
    python benchmarks/peers/torch_deeplab.py --rows bf16_cl bf16_cl_compile --sizes 513x513x2
    python benchmarks/peers/torch_deeplab.py --cpu               # every row at tiny shapes

The model (torch_model.py beside this file; probes.py counts and samples) is what a
PyTorch user writes: timm's xception65 (features_only, output stride 16, random
weights), ASPP with separable atrous branches at rates 6/12/18, the 48-channel decoder,
21 classes as benchmarks/gpu.py's MODEL; cross-entropy (ignore_index 255) and SGD with
momentum 0.9, as tfseg trains.
Rows, each in a fresh process (`--child ROW SIZE`), so memory and compile caches are clean:

- fp32_tf32: float32 with TF32 on, channels_first (tfseg's float32 rows run TF32 too);
- bf16_cl: bfloat16 autocast, model and input channels_last (tfseg's `_bf16` rows);
- bf16_cl_compile: the same under torch.compile (default mode); compile time is in
  `first_step_seconds`, not the step time;
- bf16_cl_ckpt: the same (no compile), the 16 middle-flow units under
  torch.utils.checkpoint (non-reentrant), as tfseg's recompute row recomputes blocks;
- fp32_tf32_compile, fp32_tf32_ckpt: the float32 forms of the last two (by name only).

Per row and size (HxWxB, default 1024x2048x1 and 513x513x2): --warmup steps, then
--steps timed steps (CUDA events, median), the allocator's peak (max_memory_allocated)
over its base (memory_allocated before the timed steps: weights, momentum), and NVML's
GPU busy % (null without nvidia-ml-py). First it prints the parameter count beside
tfseg's (built in a CPU-only subprocess where tfseg imports, else the recorded 41.26 M):
they should agree within 2%, else the line says where they differ. Each result is one
JSON line on stdout, appended to --out as soon as its row ends; rows that would start
after --max_seconds are skipped, saying so. Without torch or timm, or without a GPU (and
without --cpu), it exits 2 with one line.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = "benchmarks/peers/torch_deeplab.py"
# name: (bfloat16 autocast, channels_last, torch.compile, checkpoint the middle flow)
ROWS = {"fp32_tf32": (False, False, False, False), "bf16_cl": (True, True, False, False),
        "bf16_cl_compile": (True, True, True, False), "bf16_cl_ckpt": (True, True, False, True),
        "fp32_tf32_compile": (False, False, True, False),
        "fp32_tf32_ckpt": (False, False, False, True)}
DEFAULT_ROWS = ["fp32_tf32", "bf16_cl", "bf16_cl_compile", "bf16_cl_ckpt"]
def refuse(message):
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


class Parser(argparse.ArgumentParser):
    def error(self, message):
        refuse(f"{message} (--help lists the arguments)")


def size(text):
    try:
        h, w, b = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size {text!r} is not HxWxB, e.g. 513x513x2")
    return h, w, b


def child(args, row, shape):
    """One row at one size, in this (fresh) process: its result as a dict."""
    import timm
    import torch
    import torch.nn.functional as F

    import probes  # beside this file
    import torch_model

    bf16, channels_last, compiled, ckpt = ROWS[row]
    dev = torch.device("cpu" if args.cpu else "cuda")
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True  # TF's float32 default on Ampere and later
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True  # fixed shapes: what a PyTorch user turns on
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = torch_model.DeepLabV3Plus(args.classes, checkpoint_middle=ckpt)
    model = model.to(dev, memory_format=fmt).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    # The dry run compiles with aot_eager: dynamo and AOT autograd trace the same graph,
    # but inductor's C++ build takes minutes on a small CPU.
    forward = torch.compile(model, backend="aot_eager" if args.cpu else "inductor") \
        if compiled else model
    h, w, b = shape
    images = torch.randn(b, 3, h, w, device=dev).contiguous(memory_format=fmt)
    labels = torch.randint(0, args.classes, (b, h, w), device=dev)
    labels[torch.rand(b, h, w, device=dev) < 0.05] = 255  # some ignored pixels

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(forward(images), labels, ignore_index=255)
        loss.backward()
        optimizer.step()
        return loss

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    start = time.perf_counter()
    step()
    sync()
    first = time.perf_counter() - start  # with torch.compile: the compile
    for _ in range(args.warmup - 1):
        step()
    sync()
    cuda = dev.type == "cuda"
    if cuda:
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    times = []
    with probes.Busy() as busy:
        for _ in range(args.steps):
            if cuda:
                begin = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                begin.record()
                loss = step()
                end.record()
                end.synchronize()
                times.append(begin.elapsed_time(end) / 1e3)
            else:
                begin = time.perf_counter()
                loss = step()
                times.append(time.perf_counter() - begin)
    peak = torch.cuda.max_memory_allocated() if cuda else None
    median = statistics.median(times)
    return {"kind": "step", "row": row, "size": "x".join(map(str, shape)), "height": h,
            "width": w, "batch": b, "bf16": bf16, "channels_last": channels_last,
            "compile": compiled and ("aot_eager" if args.cpu else "inductor"),
            "checkpoint_middle": ckpt, "tf32": True,
            "device": torch.cuda.get_device_name() if cuda else "CPU",
            "torch": torch.__version__, "timm": timm.__version__,
            "params": sum(p.numel() for p in model.parameters()),
            "step_seconds": median, "step_seconds_all": times,
            "images_per_second": b / median, "first_step_seconds": first,
            "warmup_steps": args.warmup, "timed_steps": args.steps,
            "base_bytes": base if cuda else None, "peak_bytes": peak,
            "peak_over_base_bytes": peak - base if cuda else None,
            "gpu_busy_percent": busy.mean(), "loss": float(loss)}


def emit(line, out):
    text = json.dumps(line)
    print(text, flush=True)
    with open(out, "a") as f:  # now, so that a later kill loses no finished row
        f.write(text + "\n")


def run_rows(args, argv):
    import probes  # beside this file

    began = time.monotonic()
    if not args.no_params:  # builds tfseg's model on the CPU: seconds a lease may not spare
        emit(dict(probes.params_line(args.classes), dry_run=args.cpu), args.out)
    for shape in args.sizes:
        for row in args.rows:
            label = {"row": row, "size": "x".join(map(str, shape))}
            left = args.max_seconds - (time.monotonic() - began)
            if left < 30:
                emit(dict(label, kind="skipped", why=f"--max_seconds {args.max_seconds} spent "
                          f"(under 30 s left for this row)"), args.out)
                continue
            limit = min(args.child_timeout, left)
            command = [sys.executable, os.path.abspath(__file__), *argv,
                       "--child", row, label["size"]]
            try:
                proc = subprocess.run(command, capture_output=True, text=True, timeout=limit)
                lines = proc.stdout.strip().splitlines()
                if proc.returncode == 0 and lines:
                    emit(json.loads(lines[-1]), args.out)
                    continue
                why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            except subprocess.TimeoutExpired:
                why = f"timed out after {limit:.0f} s"
            emit(dict(label, kind="error", error=why), args.out)


def main(argv):
    parser = Parser(prog=PROG, description=__doc__.split("\n")[0])
    parser.add_argument("--rows", nargs="+", choices=sorted(ROWS),
                        help="default: the four bf16/fp32 rows")
    parser.add_argument("--sizes", nargs="+", type=size,
                        help="HxWxB; default 1024x2048x1 513x513x2")
    parser.add_argument("--classes", type=int, default=21)
    parser.add_argument("--warmup", type=int, help="steps before timing, >= 1; default 3 (1 --cpu)")
    parser.add_argument("--steps", type=int, help="timed steps; default 10 (2 with --cpu)")
    parser.add_argument("--out", default="torch_deeplab.jsonl", help="appended, one line a row")
    parser.add_argument("--max_seconds", type=float, default=540.0, help="for the whole set")
    parser.add_argument("--child_timeout", type=float, default=300.0, help="per row")
    parser.add_argument("--no_params", action="store_true",
                        help="skip the parameter count beside tfseg's")
    parser.add_argument("--cpu", action="store_true", help="dry run: tiny shapes, 2 timed steps")
    parser.add_argument("--child", nargs=2, metavar=("ROW", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.warmup = args.warmup or (1 if args.cpu else 3)
    args.steps = args.steps or (2 if args.cpu else 10)
    if args.warmup < 1 or args.steps < 1:
        refuse("--warmup and --steps must be at least 1")
    try:
        import torch
        import timm  # noqa: F401
    except ImportError as e:
        refuse(f"needs torch and timm, which tfseg does not install: {e}")
    if not args.cpu and not torch.cuda.is_available():
        refuse("no GPU here (torch.cuda.is_available() is False); --cpu runs every row "
               "at tiny shapes on the CPU")
    sys.path.insert(0, HERE)  # torch_model and probes, beside this file
    if args.child:
        print(json.dumps(child(args, args.child[0], size(args.child[1]))))
        return
    if args.cpu:
        args.rows = args.rows or sorted(ROWS)
        args.sizes = args.sizes or [(33, 49, 2), (33, 49, 1)]
    args.rows = args.rows or DEFAULT_ROWS
    args.sizes = args.sizes or [(1024, 2048, 1), (513, 513, 2)]
    run_rows(args, [*argv, "--warmup", str(args.warmup), "--steps", str(args.steps)])


if __name__ == "__main__":
    main(sys.argv[1:])
