"""Op counts of the traced training step, per variant (stock, memory saving, recompute).

    python benchmarks/ops.py                       # 513x513, batch 2, the full model
    python benchmarks/ops.py --size=1025,2049 --batch=1 --top=20
    python benchmarks/ops.py --cpu                 # tiny: width 0.25, 1 middle unit, 65x65

Each variant's step (`tfseg.profile.step.build_step`, as `--mode=train` builds it) is
traced for one batch, never run. What is counted:

- `graph_ops`: the ops of the step's own graph (`concrete_function.graph`), the count a
  `len(graph.get_operations())` gives;
- `function_ops`: the nodes of every function that graph calls, each function once
  however often it is called, found through the graph's function library (cond
  branches, while bodies, nested tf.functions; `tf.custom_gradient` and
  `tf.recompute_grad` add none: their ops are in the graph itself);
- `total_ops`: the two together;
- `live_ops`: `total_ops` less the graph's dead ops, those no output, control output or
  stateful op depends on (`tf.custom_gradient` leaves zeros for gradients nobody reads):
  what a call runs before Grappler's rewrites;
- with `--grappler`, `grappler_ops`: the nodes (graph and functions) after Grappler's
  default passes, as `tf_optimizer.OptimizeGraph` runs them on this machine's devices,
  fetching the outputs and every stateful op (the runtime runs the same passes at the
  first call, placed on its devices: on a GPU the layout pass may add transposes).

Prints a table (stock, memory_saving, recompute; the ratio to stock), the largest op
types and layer scopes where memory_saving has more ops than stock, and a last line of
JSON. The update is traced under `tfseg.training.step.make_train_step`'s default guard,
a `tf.cond`; `--guard=select` traces it written through selects instead. Bad arguments:
one line, exit 2.
"""

import collections
import json
import os
import re
import sys
import time

import refusal  # beside this file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

VARIANTS = ("stock", "memory_saving", "recompute")
FULL = dict(width_multiplier=1.0, middle_repeats=16, size=(513, 513), batch=2)
TINY = dict(width_multiplier=0.25, middle_repeats=1, size=(65, 65), batch=2)


_SUFFIX = re.compile(r"_\d+$")
# A layer's parts in its unit (a separable conv, a shortcut): stripped, so that stock's
# and the twins' layers of one unit group together.
_PART = re.compile(r"(_(depthwise|pointwise|relu|bn|pad|recompute|block))+$")


def unit_of(name, layers):
    """The model unit an op belongs to, by its name: the deepest name-scope component that
    is a layer's name (Keras 3 adds "_1" to scopes), less its part suffixes
    ("entry_block3_sepconv1"); else the op's first scope component ("sgd", "pixel_loss"),
    or "(top)". Forward and gradient (`gradient_tape/...`) ops share a unit."""
    parts = [_SUFFIX.sub("", p) for p in name.split("/")[:-1]]
    for part in reversed(parts):
        if part in layers:
            return _PART.sub("", part)
    return parts[0] if parts else "(top)"


def count_ops(graph, layers=()):
    """Op counts of a traced graph and of the functions it calls.

    Args:
      graph: a `tf.Graph` (a concrete function's `.graph`).
      layers: layer names (not the model's own) to group the graph's ops by (`unit_of`).

    Returns a dict: `graph_ops`, `function_ops`, `total_ops`, `live_ops`, `functions` (how many),
    `by_type` {op type: count, graph and functions}, `by_unit` {unit: count; a function
    body counts as "function:<name less its number>"}, `by_unit_type` {"unit type": count}.

    Example::

        fn = tf.function(lambda x: tf.cond(x > 0, lambda: x, lambda: -x))
        count_ops(fn.get_concrete_function(tf.constant(1.0)).graph)["function_ops"]  # > 0
    """
    layers = set(layers)
    ops = graph.get_operations()
    units = [unit_of(op.name, layers) for op in ops]
    by_type = collections.Counter(op.type for op in ops)
    by_unit = collections.Counter(units)
    by_unit_type = collections.Counter(f"{u} {op.type}" for u, op in zip(units, ops))
    library = graph.as_graph_def().library.function
    function_ops = 0
    for function in library:
        nodes = function.node_def
        function_ops += len(nodes)
        by_type.update(node.op for node in nodes)
        by_unit[f"function:{_SUFFIX.sub('', function.signature.name)}"] += len(nodes)
    return {"graph_ops": len(ops), "function_ops": function_ops,
            "total_ops": len(ops) + function_ops, "functions": len(library),
            "live_ops": len(live(graph)) + function_ops,
            "by_type": dict(by_type), "by_unit": dict(by_unit),
            "by_unit_type": dict(by_unit_type)}


def live(graph):
    """The graph's ops that a call runs: those its outputs, its control outputs or a
    stateful op (an assignment, a random op) depend on, through data and control inputs.
    The rest (e.g. zeros made for gradients nobody reads) never run."""
    roots = [t.op for t in getattr(graph, "outputs", [])]
    roots += list(getattr(graph, "control_outputs", []))
    roots += [op for op in graph.get_operations() if op._is_stateful]
    seen, stack = set(), list(roots)
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return seen


def build(config, guard):
    """(model, step) of `config` (a `tfseg.profile.step.StepConfig`): `build_step`'s (its
    guard: "cond"), or for another `guard` ("auto", "select") the same parts with that
    guard on the update (`tfseg.training.step.make_train_step`)."""
    import tensorflow as tf

    from tfseg.profile.step import build_model, build_step
    from tfseg.runtime import builders
    from tfseg.split import split_for_run
    from tfseg.training import losses, optim
    from tfseg.training.step import make_train_step

    if guard == "cond":
        _, model, _, step = build_step(config)
        return model, step
    run = config.run_config()
    strategy = builders.strategy(run)
    builders.set_dtype_policy(run)
    norm = builders.norm_for(run, strategy)
    with strategy.scope():
        model = build_model(config, norm)
        loss = losses.for_model(model, run.optim.class_weights, resized=not run.run.model_devices)
        model = split_for_run(run, model, loss, overhead=lambda: 0)
        optimizer = optim.optimizer(run, model)
        counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    step = make_train_step(strategy, model, optimizer, loss, counter, builders.jit_mode(run),
                           *optim.l2_weight_decay(run, model),
                           accum_steps=run.optim.grad_accum_steps, guard=guard)
    return model, step


def grappler_ops(function):
    """Nodes of a concrete function's graph and its functions after Grappler's passes."""
    import tensorflow as tf
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.grappler import tf_optimizer

    graph = function.graph
    meta = tf.compat.v1.train.export_meta_graph(graph_def=graph.as_graph_def(), graph=graph)
    fetch = meta.collection_def["train_op"].node_list.value
    fetch.extend(t.op.name for t in function.outputs)
    fetch.extend(op.name for op in graph.get_operations() if op.op_def.is_stateful)
    out = tf_optimizer.OptimizeGraph(config_pb2.ConfigProto(), meta, graph_id=b"step")
    return len(out.node) + sum(len(f.node_def) for f in out.library.function)


def trace(variant, args):
    """count_ops of `variant`'s step, traced for one [batch, height, width] batch."""
    import keras
    import tensorflow as tf

    from tfseg.profile.step import StepConfig

    keras.backend.clear_session()
    height, width = args.size
    config = StepConfig.of(variant=variant, num_classes=args.classes, height=height,
                           width=width, batch=args.batch, width_multiplier=args.width,
                           middle_repeats=args.middle)
    start = time.perf_counter()
    model, step = build(config, args.guard)
    function = step.get_concrete_function((tf.TensorSpec((args.batch, height, width, 3), tf.uint8),
                                           tf.TensorSpec((args.batch, height, width), tf.int32)))
    counts = count_ops(function.graph, [layer.name for layer in model._flatten_layers()
                                        if layer is not model])
    if args.grappler:
        counts["grappler_ops"] = grappler_ops(function)
    counts["trace_seconds"] = round(time.perf_counter() - start, 1)
    return counts


def growth(counts, key, base="stock", variant="memory_saving", top=10):
    """The `top` entries of `counts[v][key]` that grow most from `base` to `variant`:
    [(name, base count, variant count)]."""
    a, b = counts[base][key], counts[variant][key]
    names = sorted(set(a) | set(b), key=lambda n: (a.get(n, 0) - b.get(n, 0), n))
    return [(n, a.get(n, 0), b.get(n, 0)) for n in names[:top] if b.get(n, 0) > a.get(n, 0)]


def parse(argv):
    """The arguments, checked: a bad one is one line on stderr and exit 2."""
    parser = refusal.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu", action="store_true",
                        help="tiny: width 0.25, 1 middle unit, 65x65, batch 2")
    parser.add_argument("--size", help="HEIGHT,WIDTH (default 513,513; --cpu 65,65)")
    parser.add_argument("--batch", type=int)  # default 2
    parser.add_argument("--width", type=float)  # the width multiplier, default 1.0
    parser.add_argument("--middle", type=int)  # middle-flow units, default 16
    parser.add_argument("--classes", type=int, default=21)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--guard", choices=("cond", "select"), default="cond")
    parser.add_argument("--grappler", action="store_true", help="count after Grappler too")
    parser.add_argument("--top", type=int, default=12, help="rows of each contributor table")
    args = parser.parse_args(argv)
    defaults = TINY if args.cpu else FULL
    try:
        args.size = tuple(int(v) for v in (args.size or "%d,%d" % defaults["size"]).split(","))
        if len(args.size) != 2 or min(args.size) < 17:
            raise ValueError
    except ValueError:
        parser.exit(2, f"ops.py: --size: HEIGHT,WIDTH of at least 17 each, got {args.size}\n")
    args.variants = tuple(v for v in args.variants.split(",") if v)
    bad = [v for v in args.variants if v not in VARIANTS]
    if bad or "stock" not in args.variants:
        parser.exit(2, f"ops.py: --variants: stock and any of {VARIANTS}, "
                       f"got {bad or 'no stock'}\n")
    args.batch, args.width, args.middle = (args.batch or defaults["batch"], args.width or
                                           defaults["width_multiplier"],
                                           args.middle or defaults["middle_repeats"])
    if args.batch < 1 or args.width <= 0 or args.middle < 1:
        parser.exit(2, "ops.py: --batch, --width and --middle must be positive\n")
    return args


def main(argv=None):
    args = parse(argv)
    if args.cpu:
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    from tfseg.errors import InputError

    try:
        counts = {v: trace(v, args) for v in args.variants}
    except InputError as error:  # e.g. a --size that does not fit the output stride
        print(f"ops.py: {error}", file=sys.stderr)
        sys.exit(2)
    stock = counts["stock"]["total_ops"]
    print(f"DeepLabv3+ Xception-65, width {args.width}, {args.middle} middle units, "
          f"{args.size[0]}x{args.size[1]}, batch {args.batch}, {args.classes} classes, "
          f"guard {args.guard}")
    print(f"{'variant':<14}{'graph_ops':>10}{'function_ops':>14}{'total_ops':>11}"
          f"{'x stock':>9}{'live_ops':>10}{'x stock':>9}{'grappler_ops':>14}{'x stock':>9}"
          f"{'trace s':>9}")
    for v, c in counts.items():
        after = c.get("grappler_ops")
        grappler = (f"{after:>14,}{after / counts['stock']['grappler_ops']:>9.3f}"
                    if after else f"{'-':>14}{'-':>9}")
        print(f"{v:<14}{c['graph_ops']:>10,}{c['function_ops']:>14,}{c['total_ops']:>11,}"
              f"{c['total_ops'] / stock:>9.3f}{c['live_ops']:>10,}"
              f"{c['live_ops'] / counts['stock']['live_ops']:>9.3f}{grappler}"
              f"{c['trace_seconds']:>9.1f}")
    if "memory_saving" in counts:
        for key, title in (("by_type", "op type"), ("by_unit", "unit"),
                           ("by_unit_type", "unit and op type")):
            print(f"\nmemory_saving - stock, by {title}:")
            for name, a, b in growth(counts, key, top=args.top):
                print(f"  {name:<48}{a:>8,}{b:>8,}{b - a:>+8,}")
    summary = {"size": list(args.size), "batch": args.batch, "width_multiplier": args.width,
               "middle_repeats": args.middle, "num_classes": args.classes, "guard": args.guard,
               "counts": {v: {k: c.get(k) for k in ("graph_ops", "function_ops", "total_ops",
                                                     "live_ops", "functions", "grappler_ops",
                                                     "trace_seconds")}
                          for v, c in counts.items()},
               "ratio_to_stock": {v: round(c["total_ops"] / stock, 4) for v, c in counts.items()},
               "live_ratio_to_stock": {v: round(c["live_ops"] / counts["stock"]["live_ops"], 4)
                                       for v, c in counts.items()},
               "graph_ratio_to_stock": {v: round(c["graph_ops"] / counts["stock"]["graph_ops"], 4)
                                        for v, c in counts.items()}}
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
