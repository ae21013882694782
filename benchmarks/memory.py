"""Training-step memory and time: stock Keras layers vs tfseg's memory-saving twins.

Full DeepLabv3+ / Xception-65, 21 classes, OS16, momentum SGD, one full training
step (forward, backward, update), each variant measured in its own fresh process
(see tfseg/memory/measure.py for the recipe). Prints a table with ratios to stock
and one JSON line.

    python benchmarks/memory.py                    # 513x513, batch 2, fp32
    python benchmarks/memory.py --full_resolution  # 1024x2048, batch 1 (+ bf16 row)
"""

import argparse
import dataclasses
import json
import statistics
import sys

from tfseg.memory.measure import StepConfig, measure
from tfseg.models.xception import DEFAULT_RECOMPUTE
TARGETS = {"memory_saving": (0.50, 1.10), "recompute": (0.35, 1.35)}


def variants(args):
    base = StepConfig(
        height=args.height,
        width=args.width,
        batch=args.batch,
        width_multiplier=args.width_multiplier,
        middle_repeats=args.middle_repeats,
        norm=args.norm,
        timed_steps=args.timed_steps,
    )
    rows = {
        "stock": base,
        "memory_saving": dataclasses.replace(base, variant="memory_saving"),
        "recompute": dataclasses.replace(base, variant="recompute", recompute_blocks=tuple(args.recompute)),
        "stock_xla": dataclasses.replace(base, jit_compile=True),
    }
    if args.full_resolution:
        rows["recompute_bf16"] = dataclasses.replace(
            rows["recompute"], dtype_policy="mixed_bfloat16"
        )
    return {name: rows[name] for name in args.variants or rows}


def run(config, repeats):
    results = [measure(config) for _ in range(repeats)]
    return {
        "peak_mib": statistics.median(r["peak_over_base_bytes"] for r in results) / 2**20,
        "base_mib": statistics.median(r["base_bytes"] for r in results) / 2**20,
        "step_s": statistics.median(r["step_seconds"] for r in results),
        "device": results[0]["device"],
        "parameters": results[0]["parameters"],
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full_resolution", action="store_true", help="1024x2048, batch 1")
    parser.add_argument("--height", type=int, default=513)
    parser.add_argument("--width", type=int, default=513)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--norm", default="batch", choices=["batch", "sync_batch", "group"])
    parser.add_argument("--width_multiplier", type=float, default=1.0)
    parser.add_argument("--middle_repeats", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=1, help="fresh processes per variant")
    parser.add_argument("--timed_steps", type=int, default=1)
    parser.add_argument("--variants", nargs="*", help="subset of variants to run")
    parser.add_argument("--recompute", nargs="*", default=DEFAULT_RECOMPUTE,
                        help="backbone blocks the recompute variant recomputes")
    args = parser.parse_args(argv)
    if args.full_resolution:
        args.height, args.width, args.batch = 1024, 2048, 1

    results = {}
    print(f"{'variant':<20}{'peak MiB':>10}{'x stock':>9}{'step s':>9}{'x stock':>9}{'target':>16}")
    for name, config in variants(args).items():
        results[name] = run(config, args.repeats)
        r, stock = results[name], results.get("stock")
        mem_ratio = r["peak_mib"] / stock["peak_mib"] if stock else float("nan")
        time_ratio = r["step_s"] / stock["step_s"] if stock else float("nan")
        r.update(memory_ratio=round(mem_ratio, 3), time_ratio=round(time_ratio, 3))
        target = TARGETS.get(name)
        verdict = ""
        if target and stock:
            met = mem_ratio <= target[0] and time_ratio <= target[1]
            verdict = f"<={target[0]:.2f}/<={target[1]:.2f} {'met' if met else 'MISSED'}"
        print(
            f"{name:<20}{r['peak_mib']:>10.0f}{mem_ratio:>9.2f}{r['step_s']:>9.2f}"
            f"{time_ratio:>9.2f}{verdict:>16}",
            flush=True,
        )
    summary = {
        "benchmark": "memory",
        "height": args.height,
        "width": args.width,
        "batch": args.batch,
        "norm": args.norm,
        "variants": results,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
