"""Training-step memory and time: stock Keras layers vs tfseg's memory-saving twins.

Full DeepLabv3+ / Xception-65, 21 classes, OS16, one full training step as
`--mode=train` runs it (`tfseg.training.step.make_train_step`: forward, backward,
finite check, update; SGD momentum 0.9 and L2 weight decay 4e-5, the training
defaults), each variant measured in its own fresh process (see
tfseg/profile/measure.py for the recipe). Prints a table with ratios to stock
and one JSON line.

    python benchmarks/memory.py                    # 513x513, batch 2, fp32
    python benchmarks/memory.py --full_resolution  # 1024x2048, batch 1 (+ bf16 rows)
    python benchmarks/memory.py --variants stock memory_saving --repeats 5 --interleave

    python benchmarks/memory.py --research_recipe  # crop 769, batch 16: the plan for 16 GiB

`--research_recipe` plans research/deeplab's Cityscapes recipe (crop 769x769, batch 16,
19 classes, batch norm trained, fp32), which needs 8 GPUs there, for one 16 GiB card
minus an assumed GPU overhead (`ASSUMED_GPU_OVERHEAD_GB`: the card is not at hand, so
its overhead cannot be measured): the static estimate of each plan
(never run: such a step takes far too long on 2 CPU cores), the first that fits, as
`--mode=train --memory_budget_gb=16` would choose it without verifying.

`--static` gives each row's static estimate instead (the step traced in a fresh
process and simulated, never run; `tfseg.profile.simulate`): for rows too slow to run
here, such as mixed_bfloat16 at full resolution on a CPU without native bf16.

`--interleave` runs the variants' processes in rounds (stock, memory saving, stock,
...) instead of each variant's repeats in a row, so a slow stretch of a shared
machine falls on every variant alike: the step-time ratios' measurement.

With `--full_resolution` it also checks the full-resolution targets for the totals (base +
peak over base: everything the allocator holds at the step's peak): memory saving
<= 5.0 GB in fp32; with recompute <= 3.5 GB in fp32 and <= 2.5 GB under
mixed_bfloat16.
"""

import json
import sys

import refusal  # beside this file

refusal.quiet_tensorflow()  # before the imports below, which import TensorFlow

from tfseg.budget.choose import choose  # noqa: E402
from tfseg.config import MEMORY_ANCHORS, Optim  # noqa: E402
from tfseg.errors import InputError  # noqa: E402
from tfseg.models.xception import DEFAULT_RECOMPUTE  # noqa: E402
from tfseg.profile.anchors import anchor_step  # noqa: E402
from tfseg.profile.measure import combine, measure, measure_repeats  # noqa: E402
from tfseg.profile.step import StepConfig  # noqa: E402
from tfseg.units import GB, GIB, MIB  # noqa: E402

# The goals: each variant's (peak over base, step time) at most these ratios to stock's.
TARGETS = {"memory_saving": (0.28, 1.00), "recompute": (0.18, 1.15)}
# The full-resolution targets: each variant's total at most this many GB (10^9 bytes).
FULL_RESOLUTION_TARGETS_GB = {"memory_saving": 5.0, "recompute": 3.5, "recompute_bf16": 2.5}

# The research recipe's card is not at hand, so its overhead (CUDA context, cuDNN/cuBLAS)
# cannot be measured (tfseg.runtime.device): a CUDA 12 context with lazy loading and the
# libraries' handles; benchmarks/gpu.py measures a real card's.
ASSUMED_GPU_OVERHEAD_GB = 0.8


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
        # XLA drops control dependencies, so a rebuild ordered by one alone could run early:
        # this row checks that the data dependency gating each rebuild on its gradient keeps
        # the saving.
        "memory_saving_xla": base.replace(variant="memory_saving", jit_compile=True),
        # Each block its own XLA computation (tfseg.xla.Blocks): the rewrite's saving
        # must hold across the blocks' boundaries too.
        "stock_blocks": base.replace(jit_compile="blocks"),
        "memory_saving_blocks": base.replace(variant="memory_saving", jit_compile="blocks"),
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
    return summarize(measure_repeats(config, repeats))


def run_interleaved(configs, repeats):
    """{variant: summary} from `repeats` rounds, each measuring every variant once in
    a fresh process; the first round analyses. A variant that fails: {"error": why}."""
    runs, failed = {name: [] for name in configs}, {}
    for round_ in range(repeats):
        for name, config in configs.items():
            if name in failed:
                continue
            if round_:
                config = config.replace(analyze=False, analyze_batches=())
            try:
                runs[name].append(measure(config))
            except RuntimeError as error:
                failed[name] = {"error": str(error)}
    return {name: failed.get(name) or summarize(combine(runs[name])) for name in configs}


def run_static(config):
    """The static estimate of `config`'s step (traced in a fresh process, never run):
    the simulator's peak, within ~15% of the measured one on the tested configs."""
    r = measure(config.replace(run_steps=False, analyze=True, analyze_batches=()))
    seconds = r["analysis"].get("estimated_step_seconds") or float("nan")
    return summarize({**r, "step_seconds": seconds, "step_seconds_by_process": [seconds]})


def summarize(r):
    return {
        "peak_mib": r["peak_over_base_bytes"] / MIB,
        "base_mib": r["base_bytes"] / MIB,
        "total_bytes": r["base_bytes"] + r["peak_over_base_bytes"],
        "step_s": r["step_seconds"],
        "step_s_by_process": r["step_seconds_by_process"],
        "device": r["device"],
        "parameters": r["parameters"],
    }


def full_resolution_checks(results, configs, static=False):
    """{variant: its total in GB, the target and whether it is met} for the
    variants with a full-resolution target that were run; prints them."""
    checks = {}
    kind = "static estimates, not measured" if static else "measured"
    print(f"full-resolution targets (total = base + peak over base; GB = 10^9 bytes; {kind}):")
    for name, target in FULL_RESOLUTION_TARGETS_GB.items():
        if name not in results or "error" in results[name]:
            continue
        total = results[name]["total_bytes"] / GB
        policy = configs[name].run.flat()["dtype_policy"]
        checks[name] = {"dtype_policy": policy, "total_gb": round(total, 3), "static": static,
                        "target_gb": target, "met": total <= target}
        print(f"  {name} ({policy}): {total:.2f} GB, target <= {target} GB: "
              f"{'met' if total <= target else 'MISSED'}", flush=True)
    return checks


def research_recipe(args, budget_gib=16):
    """research/deeplab's Cityscapes recipe planned for one `budget_gib` card; prints
    the chosen plan's line and returns it with every plan estimated."""
    step = StepConfig.of(num_classes=19, height=769, width=769, batch=16,
                         width_multiplier=args.width_multiplier,
                         middle_repeats=args.middle_repeats, norm=args.norm, timed_steps=0)
    overhead = int(ASSUMED_GPU_OVERHEAD_GB * GIB)
    try:
        choice = choose(step, budget_gib * GIB, overhead, verify=False)
    except InputError as error:  # nothing fits: the line says what would
        print(f"research recipe: MISSED: {error}", flush=True)
        return {"budget_gib": budget_gib, "error": str(error)}
    print(choice.line())
    point = choice.chosen
    print(f"research recipe (769x769, batch 16, {args.norm} norm trained, fp32): "
          f"{point['predicted_bytes'] / GIB:.2f} GiB predicted, fits {budget_gib} GiB - "
          f"{ASSUMED_GPU_OVERHEAD_GB} GiB overhead: met (static estimate, not measured)", flush=True)
    return {"budget_gib": budget_gib, **choice.to_dict()}


def main(argv=None):
    parser = refusal.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full_resolution", action="store_true", help="1024x2048, batch 1")
    parser.add_argument("--research_recipe", action="store_true",
                        help="plan crop 769, batch 16 for a 16 GiB card (static estimates)")
    parser.add_argument("--height", type=int, default=513)
    parser.add_argument("--width", type=int, default=513)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--norm", default="batch", choices=["batch", "sync_batch", "group"])
    parser.add_argument("--width_multiplier", type=float, default=1.0)
    parser.add_argument("--middle_repeats", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3,
                        help="fresh processes per variant (the median is reported)")
    parser.add_argument("--static", action="store_true",
                        help="static estimates of the traced steps instead of measured runs")
    parser.add_argument("--interleave", action="store_true",
                        help="measure the variants in rounds (step-time ratios)")
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
    if args.research_recipe:
        print(json.dumps({"benchmark": "memory", "research_recipe": research_recipe(args)}))
        return 0

    results, configs = {}, variants(args)
    print(f"{'variant':<28}{'base MiB':>10}{'peak MiB':>10}{'x stock':>9}{'step s':>9}"
          f"{'x stock':>9}{'target':>16}")
    interleaved = (run_interleaved(configs, args.repeats)
                   if args.interleave and not args.static else None)
    for name, config in configs.items():
        try:
            if args.static:
                results[name] = run_static(config)
            elif interleaved is not None:
                results[name] = interleaved[name]
            else:
                results[name] = run(config, args.repeats)
        except RuntimeError as error:  # a tool that does not run on this step: say so
            results[name] = {"error": str(error)}
        if "error" in results[name]:
            print(f"{name:<28}failed: {results[name]['error']}", flush=True)
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
        "interleaved": args.interleave,
        "static_estimates": args.static,
        "variants": results,
    }
    if args.full_resolution:
        summary["full_resolution_targets"] = full_resolution_checks(results, configs,
                                                                    args.static)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
