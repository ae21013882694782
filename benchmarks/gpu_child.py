"""The processes `benchmarks/gpu.py` starts, one fresh process per measurement.

    python benchmarks/gpu_child.py parity '{"dtype": "float64", "size": [65, 97], ...}'
    python benchmarks/gpu_child.py step '{"step": <StepConfig JSON>, "layout_optimizer": false}'
    python benchmarks/gpu_child.py step '{"step": <StepConfig JSON>, "profile": true}'

Each prints one JSON line. `parity`: one training step's gradients of memory saving and
recompute (and, on a GPU, memory saving with `--depthwise_kernel=grouped`) against stock's
on the same weights, as the largest absolute difference over
the largest stock gradient. `step`: a training step measured as `tfseg.profile.measure`
measures it (warm-up, gc, base, reset, steps, peak - base on `tfseg.runtime.device`'s
allocator), with Grappler's layout optimizer on or off, GPU utilisation sampled by NVML
during the timed steps, and the process's NVML memory beside the allocator's; with
"profile", one more step under TensorFlow's profiler, its time by op type on the device
and the host (`tfseg.profile.timeline`).
"""

import gc
import json
import os
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def parity(spec):
    """{variant: relative gradient error against stock} for one step on one batch."""
    import keras
    import numpy as np
    import tensorflow as tf

    from tfseg import memory
    from tfseg.config import Config
    from tfseg.models.xception import DEFAULT_RECOMPUTE
    from tfseg.runtime import builders, device

    keras.config.set_floatx(spec["dtype"])
    # The same weights in every process: in float32, draws that leave a batch norm over a
    # few values a near-zero variance amplify the kernels' rounding (the CPU dry run's
    # tiny model: 5e-6 to 1.5e-5 in most processes, 0.09 in one; 0.015 at seed 0).
    keras.utils.set_random_seed(spec.get("seed", 0))
    height, width = spec["size"]
    config = Config.from_flat(width_multiplier=spec["width_multiplier"], dropout=0.0,
                              middle_repeats=spec["middle_repeats"], crop_size=(height, width))
    images = tf.constant(np.random.RandomState(0).uniform(-1, 1, (2, height, width, 3)),
                         spec["dtype"])

    def gradients(model):
        upstream = tf.constant(np.random.RandomState(1).randn(
            *model.compute_output_shape(images.shape)), model.outputs[0].dtype)

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(model(images, training=True) * upstream)
            return tape.gradient(loss, model.trainable_variables)
        return {v.path: g.numpy() for v, g in zip(model.trainable_variables, step())}

    stock = builders.model(config, num_classes=5)
    want = gradients(stock)
    scale = max(float(np.abs(g).max()) for g in want.values())
    errors = {}
    variants = [("memory_saving", dict(memory_saving=True)),
                ("recompute", dict(memory_saving=True, recompute=tuple(DEFAULT_RECOMPUTE)))]
    if device.name() != "CPU:0":  # the twins' depthwise convs as cuDNN's grouped convs
        variants.append(("memory_saving_grouped",
                         dict(memory_saving=True, depthwise_kernel="grouped")))
    for name, changes in variants:
        try:
            twin = builders.model(config.replace(**changes), num_classes=5)
            memory.copy_weights(stock, twin)
            got = gradients(twin)
        except tf.errors.OpError as error:  # a kernel the card lacks (float64 grouped?)
            if name != "memory_saving_grouped":
                raise
            errors[name] = str(error).strip().splitlines()[0][:200]
            continue
        errors[name] = max(float(np.abs(got[p] - g).max()) for p, g in want.items()) / scale
    # TF32 applies on a GPU from Ampere on, unless NVIDIA_TF32_OVERRIDE=0.
    tf32 = device.name() != "CPU:0" and os.environ.get("NVIDIA_TF32_OVERRIDE") != "0"
    return {"dtype": spec["dtype"], "tf32": tf32,
            "tf32_override": os.environ.get("NVIDIA_TF32_OVERRIDE", "unset"),
            "device": device.name(), "relative_error": errors}


class Utilisation:
    """Samples GPU:0's utilisation (NVML, every `every` seconds) while entered; None
    without NVML (the CPU)."""

    def __init__(self, every=0.05):
        self.every, self.samples, self.handle = every, [], None
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nvml, self.handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # no NVML, no driver: nothing to sample
            pass
        self._stop = threading.Event()

    def _run(self):
        while not self._stop.wait(self.every):
            self.samples.append(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)

    def __enter__(self):
        if self.handle is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.handle is not None:
            self._stop.set()
            self._thread.join()

    def mean(self):
        return sum(self.samples) / len(self.samples) if self.samples else None

    def process_bytes(self):
        """This process's device memory by NVML, where NVML reports it per process."""
        if self.handle is None:
            return None
        for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle):
            if p.pid == os.getpid():
                return p.usedGpuMemory
        return None


def step(spec):
    """One training step's allocator peak over base and median step time."""
    import numpy as np
    import tensorflow as tf

    tf.config.optimizer.set_experimental_options(
        {"layout_optimizer": spec.get("layout_optimizer", True)})
    for gpu in tf.config.list_physical_devices("GPU"):  # NVML's process use: what is held
        tf.config.experimental.set_memory_growth(gpu, True)
    import keras

    from tfseg.profile.child import sample_batch
    from tfseg.profile.step import StepConfig, build_step
    from tfseg.runtime import device

    config = StepConfig.from_json(spec["step"])
    keras.utils.set_random_seed(0)
    strategy, model, _, train_step = build_step(config)
    batch = sample_batch(config, strategy)
    start = time.perf_counter()
    float(train_step(batch)[0])  # warm-up: trace, slots, the allocator's regions
    warmup = time.perf_counter() - start
    gc.collect()
    base = device.memory_info()["current"]
    times, peaks = [], []
    with Utilisation() as busy:
        for _ in range(config.timed_steps):
            device.reset_peak()
            start = time.perf_counter()
            loss = float(train_step(batch)[0])
            times.append(time.perf_counter() - start)
            peaks.append(int(device.memory_info()["peak"] - base))
    process = busy.process_bytes()
    total = base + max(peaks)
    result = {"device": device.name(), "base_bytes": int(base),
            "peak_over_base_bytes": int(np.median(peaks)), "step_seconds": float(np.median(times)),
            "warmup_seconds": warmup, "loss": loss, "gpu_utilisation_percent": busy.mean(),
            "process_bytes": process,
            # What the process holds beyond the allocator's largest total: the device
            # overhead under a real step (an upper bound: the allocator's spare regions too).
            "outside_allocator_bytes": None if process is None else int(process - total)}
    if spec.get("profile"):
        # One more step under the profiler, after the measurement is printed: a profiler
        # that fails the process (CUPTI) leaves the parent the line above.
        print(json.dumps(result), flush=True)
        from tfseg.profile.timeline import profile

        result["profile"] = profile(lambda: float(train_step(batch)[0]),
                                    tempfile.mkdtemp(prefix="tfseg_profile_"))
    return result


if __name__ == "__main__":
    kind, payload = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps({"parity": parity, "step": step}[kind](payload)))
