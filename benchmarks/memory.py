"""Training-step memory and time: stock Keras layers vs tfseg's memory-saving twins.

Full DeepLabv3+ / Xception-65, 21 classes, OS16, one full training step as
`--mode=train` runs it (`tfseg.train.step.make_train_step`: forward, backward,
finite check, update; SGD momentum 0.9 and L2 weight decay 4e-5, the training
defaults), each variant measured in its own fresh process (see
tfseg/profile/measure.py for the recipe). Prints a table with ratios to stock
and one JSON line.

    python benchmarks/memory.py                    # 513x513, batch 2, fp32
    python benchmarks/memory.py --full_resolution  # 1024x2048, batch 1 (+ bf16 rows)

With `--full_resolution` it also checks the issue's targets for the totals (base +
peak over base: everything the allocator holds at the step's peak): memory saving
<= 5.0 GB in fp32; with recompute <= 3.5 GB in fp32 and <= 2.5 GB under
mixed_bfloat16.
"""

import argparse
import json
import sys

from tfseg.config import MEMORY_ANCHORS, Optim
from tfseg.models.xception import DEFAULT_RECOMPUTE
from tfseg.profile.anchors import anchor_step
from tfseg.profile.measure import measure_repeats
from tfseg.profile.step import StepConfig

# (peak over base, step time), each as a ratio to stock's: issue 14's goals.
TARGETS = {"memory_saving": (0.35, 1.03), "recompute": (0.20, 1.35)}
# The full-resolution targets: the variant's total, in GB of 10^9 bytes.
FULL_RESOLUTION_TARGETS_GB = {"memory_saving": 5.0, "recompute": 3.5, "recompute_bf16": 2.5}
GB = 10**9


def variants(args):
    base = StepConfig.of(
        num_classes=21,
        height=args.height,
        width=args.width,
        batch=args.batch,
        width_multiplier=args.width_multiplier,
        middle_repeats=args.middle_repeats,
        norm=args.norm,
        timed_steps=args.timed_steps,
        momentum=args.momentum,
        weight_decay=args.weight_decay,
        weight_decay_type=args.weight_decay_type,
    )
    rows = {
        "stock": base,
        "memory_saving": base.replace(variant="memory_saving"),
        "recompute": base.replace(variant="recompute", recompute_blocks=tuple(args.recompute)),
        "stock_xla": base.replace(jit_compile=True),
        # XLA drops control dependencies (pitfall P3): this row checks that the
        # data dependency gating each rebuild on its gradient keeps the saving.
        "memory_saving_xla": base.replace(variant="memory_saving", jit_compile=True),
        # What a Keras user would use instead (tfseg/profile/anchors.py), on the
        # recompute variant's segments where they take segments.
        **{name: anchor_step(base, name).replace(recompute_blocks=tuple(args.recompute))
           for name in MEMORY_ANCHORS},
    }
    if args.full_resolution:
        for name in ("memory_saving", "recompute"):
            rows[f"{name}_bf16"] = rows[name].replace(dtype_policy="mixed_bfloat16")
    return {name: rows[name] for name in args.variants or rows}


def run(config, repeats):
    r = measure_repeats(config, repeats)
    return {
        "peak_mib": r["peak_over_base_bytes"] / 2**20,
        "base_mib": r["base_bytes"] / 2**20,
        "total_bytes": r["base_bytes"] + r["peak_over_base_bytes"],
        "step_s": r["step_seconds"],
        "device": r["device"],
        "parameters": r["parameters"],
    }


def full_resolution_checks(results, configs):
    """{variant: its total in GB, the target and whether it is met} for the
    variants with a full-resolution target that were run; prints them."""
    checks = {}
    print("full-resolution targets (total = base + peak over base; GB = 10^9 bytes):")
    for name, target in FULL_RESOLUTION_TARGETS_GB.items():
        if name not in results or "error" in results[name]:
            continue
        total = results[name]["total_bytes"] / GB
        policy = configs[name].run.flat()["dtype_policy"]
        checks[name] = {"dtype_policy": policy, "total_gb": round(total, 3),
                        "target_gb": target, "met": total <= target}
        print(f"  {name} ({policy}): {total:.2f} GB, target <= {target} GB: "
              f"{'met' if total <= target else 'MISSED'}", flush=True)
    return checks


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full_resolution", action="store_true", help="1024x2048, batch 1")
    parser.add_argument("--height", type=int, default=513)
    parser.add_argument("--width", type=int, default=513)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--norm", default="batch", choices=["batch", "sync_batch", "group"])
    parser.add_argument("--width_multiplier", type=float, default=1.0)
    parser.add_argument("--middle_repeats", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3,
                        help="fresh processes per variant (the median is reported)")
    parser.add_argument("--timed_steps", type=int, default=1)
    parser.add_argument("--momentum", type=float, default=Optim().momentum)
    parser.add_argument("--weight_decay", type=float, default=Optim().weight_decay)
    parser.add_argument("--weight_decay_type", default=Optim().weight_decay_type,
                        choices=["l2", "decoupled"])
    parser.add_argument("--variants", nargs="*", help="subset of variants to run")
    parser.add_argument("--recompute", nargs="*", default=DEFAULT_RECOMPUTE,
                        help="backbone blocks the recompute variant recomputes")
    args = parser.parse_args(argv)
    if args.full_resolution:
        args.height, args.width, args.batch = 1024, 2048, 1

    results, configs = {}, variants(args)
    print(f"{'variant':<28}{'base MiB':>10}{'peak MiB':>10}{'x stock':>9}{'step s':>9}"
          f"{'x stock':>9}{'target':>16}")
    for name, config in configs.items():
        try:
            results[name] = run(config, args.repeats)
        except RuntimeError as error:  # a tool that does not run on this step: say so
            results[name] = {"error": str(error)}
            print(f"{name:<28}failed: {error}", flush=True)
            continue
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
            f"{name:<28}{r['base_mib']:>10.0f}{r['peak_mib']:>10.0f}{mem_ratio:>9.2f}"
            f"{r['step_s']:>9.2f}"
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
    if args.full_resolution:
        summary["full_resolution_targets"] = full_resolution_checks(results, configs)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
