"""Static GPU readiness of the training step, checked on the CPU against the GPU kernel
registry of the full `tensorflow` wheel (a CUDA build; `tensorflow-cpu` registers no
GPU kernels).

    python benchmarks/gpu_readiness.py                 # every configuration below
    python benchmarks/gpu_readiness.py --configs stock memory_saving_bf16

Traces (never runs) the step `--mode=train` builds for each configuration, walks every
op of it and of the functions it calls, and prints:

- every (op, dtype) with no GPU kernel (TF would run it on the host, copying its tensors
  across every step);
- every op whose GPU kernel keeps a large tensor (>= --large elements: label- or
  activation-sized) in host memory (`HostMemory` in its registration; TF registers most
  int32 kernels so).

The shape is 513x513, batch 2 (label-sized: 526,338 elements), at width 0.25 with 2 middle
units: the op kinds and the label-sized tensors are those of the full network. Prints one
JSON line last. Without a CUDA build of TensorFlow it exits 2 with one line.
"""

import collections
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import refusal  # noqa: E402  (beside this file)

# name -> StepConfig changes (flag names) from the 513x513 b2, 19-class stock step.
CONFIGS = {
    "stock": {},
    "memory_saving": dict(variant="memory_saving"),
    "recompute": dict(variant="recompute", recompute_blocks=("entry_block1", "middle")),
    "stock_bf16": dict(dtype_policy="mixed_bfloat16"),
    "memory_saving_bf16": dict(variant="memory_saving", dtype_policy="mixed_bfloat16"),
    "memory_saving_fp16": dict(variant="memory_saving", dtype_policy="mixed_float16"),
    "recompute_bf16": dict(variant="recompute", recompute_blocks=("entry_block1", "middle"),
                           dtype_policy="mixed_bfloat16"),
    "memory_saving_os8": dict(variant="memory_saving", output_stride=8),
    "memory_saving_group_norm": dict(variant="memory_saving", norm="group"),
    "stock_class_weights": dict(class_weights=(1.0,) * 19),
    "memory_saving_class_shards": dict(variant="memory_saving", class_shards=4,
                                       num_classes=150),
}
# Ops the runtime handles itself (function calls, control flow, arguments).
RUNTIME = {"PartitionedCall", "StatefulPartitionedCall", "While", "StatelessWhile", "If",
           "StatelessIf", "Case", "StatelessCase", "NoOp", "Placeholder"}


def graphs(graph, seen=None):
    """`graph` and every function graph it calls, each once."""
    seen = set() if seen is None else seen
    if id(graph) in seen:
        return []
    seen.add(id(graph))
    found = [graph]
    for function in getattr(graph, "_functions", {}).values():
        inner = getattr(function, "graph", None)
        if inner is not None:
            found += graphs(inner, seen)
    return found


def gpu_kernel(op, kernels):
    """The GPU kernel registration `op` would run, or None. DEFAULT registrations (Const,
    Identity, ReadVariableOp, ...) serve every device without a kernel of its own."""
    for kernel in kernels.get_registered_kernels_for_op(op.type).kernel:
        if kernel.device_type not in ("GPU", "DEFAULT") or kernel.label:
            continue
        ok = True
        for constraint in kernel.constraint:
            try:
                value = op.get_attr(constraint.name)
            except ValueError:
                continue
            allowed = constraint.allowed_values.list.type
            if hasattr(value, "as_datatype_enum") and value.as_datatype_enum not in allowed:
                ok = False
        if ok:
            return kernel
    return None


def arg_tensors(op, name):
    """The tensors of `op`'s input or output argument `name` (by its OpDef)."""
    for args, tensors in ((op.op_def.input_arg, list(op.inputs)),
                          (op.op_def.output_arg, list(op.outputs))):
        position = 0
        for arg in args:
            count = 1
            if arg.number_attr:
                count = op.get_attr(arg.number_attr)
            elif arg.type_list_attr:
                count = len(op.get_attr(arg.type_list_attr))
            if arg.name == name:
                return tensors[position:position + count]
            position += count
    return []


def dtype_of(op):
    for attr in ("T", "dtype", "Tidx", "SrcT", "out_type"):
        try:
            return op.get_attr(attr).name
        except (ValueError, AttributeError):
            continue
    return "-"


def check(name, changes, large):
    """(ops walked, {(op, dtype): count} without a GPU kernel, host-memory findings)."""
    import keras
    from tensorflow.python.framework import kernels

    from tfseg.profile.child import sample_batch
    from tfseg.profile.step import StepConfig, build_step

    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    changes = dict(changes)
    step = StepConfig.of(num_classes=changes.pop("num_classes", 19), height=513, width=513,
                         batch=2, width_multiplier=0.25, middle_repeats=2, timed_steps=0,
                         **changes)
    strategy, _, _, train_step = build_step(step)
    graph = train_step.get_concrete_function(sample_batch(step, strategy)).graph
    missing, host, walked = collections.Counter(), collections.Counter(), 0
    for g in graphs(graph):
        for op in g.get_operations():
            walked += 1
            if op.type in RUNTIME or op.type.startswith("_"):
                continue
            kernel = gpu_kernel(op, kernels)
            if kernel is None:
                missing[(op.type, dtype_of(op))] += 1
                continue
            for arg in kernel.host_memory_arg:
                for t in arg_tensors(op, arg):
                    size = t.shape.num_elements() if t.shape.is_fully_defined() else None
                    if size is not None and size >= large:
                        host[(op.type, t.dtype.name, tuple(t.shape.as_list()))] += 1
    keras.mixed_precision.set_global_policy("float32")
    return walked, missing, host


def main(argv=None):
    parser = refusal.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--large", type=int, default=16384,
                        help="elements from which a host-memory tensor is reported")
    args = parser.parse_args(argv)
    refusal.quiet_tensorflow()
    import tensorflow as tf

    if not tf.sysconfig.get_build_info().get("is_cuda_build"):
        refusal.refuse("needs the full tensorflow wheel (a CUDA build: its GPU kernel "
                       "registry); this is a CPU-only build")
    results = {}
    for name in args.configs:
        walked, missing, host = check(name, CONFIGS[name], args.large)
        results[name] = {
            "ops": walked,
            "no_gpu_kernel": [f"{op} {dtype} x{n}" for (op, dtype), n in sorted(missing.items())],
            "host_memory": [f"{op} {dtype} {list(shape)} x{n}"
                            for (op, dtype, shape), n in sorted(host.items())]}
        r = results[name]
        print(f"{name}: {walked:,} ops; no GPU kernel: {', '.join(r['no_gpu_kernel']) or 'none'}; "
              f"large tensors in host memory: {'; '.join(r['host_memory']) or 'none'}",
              flush=True)
    print(json.dumps({"benchmark": "gpu_readiness", "tensorflow": tf.__version__,
                      "large_elements": args.large, "configs": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
