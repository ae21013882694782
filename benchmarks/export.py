"""The exported models, per format and quantisation: file size, CPU latency and mIoU.

Usage: python benchmarks/export.py [--out_dir DIR] [--train_steps N] [--runs R]
                                   [--threads T] [--size H,W] [--width W]

Trains a small model on the synthetic Cityscapes-layout set (``main.py --mode=train``,
reused when ``DIR/run`` already holds one), exports it (``main.py --mode=export``: the
SavedModel, .keras, float32 .tflite and ONNX; then the float16, dynamic-int8 and int8
.tflite files through ``tfseg.deploy``), and for each file measures:

- its size in bytes and as a share of the float32 .tflite;
- the latency per image at the export size, the median of ``--runs`` runs after three
  warm-up runs (the rows timed in turn, round after round), in the format's own runtime
  (TensorFlow for the Keras model and the SavedModel, ``tf.lite.Interpreter`` for
  .tflite, onnxruntime for ONNX) with ``--threads`` threads each (TensorFlow's intra- and
  inter-op pools alike; onnxruntime's defaults otherwise, its threads spinning);
- the mIoU over the synthetic validation split (images at the export size) and the
  share of pixels whose class equals the Keras model's.

The size goals are checked and marked met/MISSED: float16 .tflite <= 0.5x the float32
file with mIoU within 0.2 points of the Keras model's; dynamic int8 <= 0.3x within 1
point. Prints a table and one JSON line; the exit status stays 0 (a benchmark on a
shared machine informs, it does not gate).
"""

import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import refusal  # beside this file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAIN = os.path.join(ROOT, "main.py")
# (row, quantisation share of the float32 file at most, mIoU points below Keras at most)
GOALS = {"tflite float16": (0.5, 0.2), "tflite dynamic_int8": (0.3, 1.0)}


def parse_args():
    parser = refusal.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out_dir", default="/tmp/tfseg_export_benchmark")
    parser.add_argument("--train_steps", type=int, default=300)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--size", default="128,256", help="the export size and the "
                        "synthetic images' size, HEIGHT,WIDTH")
    parser.add_argument("--width", type=float, default=0.25, help="--width_multiplier")
    return parser.parse_args()


def flags(args, data_dir, model_dir):
    return [f"--data_dir={data_dir}", f"--model_dir={model_dir}", "--dataset=cityscapes",
            f"--width_multiplier={args.width}", "--middle_repeats=2", "--seed=0"]


def main_py(*argv):
    subprocess.run([sys.executable, MAIN, *argv], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)


def prepare(args, size):
    """(data_dir, model_dir, export_dir): the set, a trained run and its export."""
    from tfseg.data import write_synthetic_cityscapes

    data_dir = write_synthetic_cityscapes(os.path.join(args.out_dir, "data"), num_train=40,
                                          num_val=10, height=size[0], width=size[1], seed=0)
    model_dir, export_dir = (os.path.join(args.out_dir, name) for name in ("run", "export"))
    common = flags(args, data_dir, model_dir)
    if not os.path.exists(os.path.join(model_dir, "checkpoint")):
        main_py("--mode=train", *common, f"--train_steps={args.train_steps}",
                "--crop_size=65,65", "--batch_size=4", f"--checkpoint_every={args.train_steps}",
                "--log_every=50")
    main_py("--mode=export", *common, f"--export_dir={export_dir}", "--overwrite",
            "--export_format=saved_model,keras,tflite,onnx", f"--export_size={size[0]},{size[1]}")
    return data_dir, model_dir, export_dir


def validation(config):
    """[(uint8 image [1, H, W, 3], int label [H, W])] of the validation split."""
    from tfseg import data as data_lib
    from tfseg.evaluation.evaluate import eval_data

    return [(image.numpy(), label.numpy()[0])
            for image, label in data_lib.build_dataset(eval_data(config), training=False)]


def latencies_ms(rows, image, runs):
    """{row: median ms per image}: three warm-up runs each, then ``runs`` rounds that
    time every row once in turn, so that load from other processes hits all alike."""
    for _, run in rows.values():
        for _ in range(3):
            run(image)
    times = {name: [] for name in rows}
    for _ in range(runs):
        for name, (_, run) in rows.items():
            start = time.perf_counter()
            run(image)
            times[name].append(time.perf_counter() - start)
    return {name: 1000 * statistics.median(t) for name, t in times.items()}


def runners(export_dir, model, quantised, threads):
    """{row: (file or folder, run(image) -> int classes [1, H, W])}."""
    import onnxruntime
    import tensorflow as tf

    from tfseg.deploy import tflite
    from tfseg.models import normalize

    keras_fn = tf.function(lambda x: tf.argmax(model(normalize(x), training=False), -1))
    served = tf.saved_model.load(os.path.join(export_dir, "saved_model"))
    serving = served.signatures["serving_default"]
    rows = {"keras": (os.path.join(export_dir, "model.keras"), lambda x: keras_fn(x).numpy()),
            "saved_model": (os.path.join(export_dir, "saved_model"),
                            lambda x: serving(image=tf.constant(x))["classes"].numpy())}

    def tflite_runner(path):
        runner = tflite.interpreter(path, num_threads=threads).get_signature_runner()
        return lambda x: runner(image=x)["classes"]

    rows["tflite float32"] = (os.path.join(export_dir, "model.tflite"),
                              tflite_runner(os.path.join(export_dir, "model.tflite")))
    for kind, path in quantised.items():
        rows[f"tflite {kind}"] = (path, tflite_runner(path))
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = onnxruntime.InferenceSession(os.path.join(export_dir, "model.onnx"), options,
                                           providers=["CPUExecutionProvider"])
    rows["onnx"] = (os.path.join(export_dir, "model.onnx"),
                    lambda x: session.run(["classes"], {"image": x})[0])
    return rows


def size_of(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def main():
    args = parse_args()
    size = tuple(int(v) for v in args.size.split(","))
    refusal.quiet_tensorflow()
    data_dir, model_dir, export_dir = prepare(args, size)

    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    from tfseg.config import Config
    from tfseg.deploy import request_of, tflite
    from tfseg.evaluation.loading import load_model
    from tfseg.evaluation.metrics import SegmentationMetrics

    config = Config.from_flat(dataset="cityscapes", data_dir=data_dir, model_dir=model_dir,
                              export_size=size, calibration_images=40)
    loaded = load_model(config, log=lambda *a: None)
    quantised = {}
    for kind in ("float16", "dynamic_int8", "int8"):
        path = os.path.join(args.out_dir, f"model_{kind}.tflite")
        request = request_of(config.replace(tflite_quantization=kind))
        with open(path, "wb") as f:
            f.write(tflite.convert(loaded.model, request))
        quantised[kind] = path
    images = validation(config)
    rows = runners(export_dir, loaded.model, quantised, args.threads)
    reference = [rows["keras"][1](image) for image, _ in images]
    load = os.getloadavg()[0]
    latency = latencies_ms(rows, images[0][0], args.runs)
    load = max(load, os.getloadavg()[0])
    results = {}
    for name, (path, run) in rows.items():
        metrics = SegmentationMetrics(loaded.classes.num_classes)
        same = []
        for (image, label), want in zip(images, reference):
            classes = np.asarray(run(image))[0]
            metrics.update(label[None], classes[None])
            same.append(np.mean(classes == want[0]))
        results[name] = {"bytes": size_of(path), "latency_ms": latency[name],
                         "miou": 100 * metrics.result()["miou"],
                         "agreement": float(np.mean(same))}
    float32 = results["tflite float32"]["bytes"]
    for name, result in results.items():
        result["size_vs_tflite_float32"] = result["bytes"] / float32
        result["miou_change"] = result["miou"] - results["keras"]["miou"]
    goals = {name: (results[name]["size_vs_tflite_float32"] <= share
                    and abs(results[name]["miou_change"]) <= points)
             for name, (share, points) in GOALS.items()}
    print(f"export size {size[0]}x{size[1]}, width {args.width}, {args.train_steps} training "
          f"steps, {len(images)} validation images, {args.threads} threads, median of "
          f"{args.runs} interleaved runs; load average up to {load:.1f} on {os.cpu_count()} "
          f"cores")
    print("| format | MB | x float32 .tflite | ms/image | mIoU | vs Keras | same class |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, r in results.items():
        goal = f" (goal {'met' if goals[name] else 'MISSED'})" if name in goals else ""
        print(f"| {name} | {r['bytes'] / 1e6:.2f} | {r['size_vs_tflite_float32']:.2f} | "
              f"{r['latency_ms']:.1f} | {r['miou']:.2f} | {r['miou_change']:+.2f}{goal} | "
              f"{100 * r['agreement']:.2f}% |")
    print(json.dumps({"benchmark": "export", "size": list(size), "width": args.width,
                      "train_steps": args.train_steps, "threads": args.threads,
                      "runs": args.runs, "load_average": load, "cores": os.cpu_count(),
                      "results": results, "goals": goals}))


if __name__ == "__main__":
    main()
