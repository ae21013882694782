"""GPU check for the step's guard: cond vs select, 513x513 b2 memory saving.
Run from the repo root: python benchmarks/device/guard_check.py
Prints per guard: median seconds for the call to return (host), and seconds per step
over 20 queued steps (synced once at the end). Run on an H200 (2026-11-28): cond 0.046 s
a step, select 0.051 s, each call returning at its step's end (docs/benchmarks.md)."""
import json, sys, time
sys.path.insert(0, "benchmarks")
import numpy as np, tensorflow as tf, keras
import ops
from tfseg.profile.step import StepConfig
from tfseg.profile.child import sample_batch
out = {}
for guard in ("cond", "select"):
    keras.backend.clear_session()
    config = StepConfig.of(variant="memory_saving", num_classes=21, height=513, width=513, batch=2)
    model, step = ops.build(config, guard)
    batch = sample_batch(config, tf.distribute.get_strategy())
    for _ in range(3):
        float(step(batch)[0])
    calls = []
    start = time.perf_counter()
    for _ in range(20):
        t = time.perf_counter(); result = step(batch); calls.append(time.perf_counter() - t)
    float(result[0])
    out[guard] = {"call_return_s": float(np.median(calls)),
                  "step_s": (time.perf_counter() - start) / 20}
print(json.dumps(out))
