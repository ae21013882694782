"""Input pipeline throughput on Cityscapes-size images (1024x2048 PNG + labelIds).

Usage: python benchmarks/input_pipeline.py [--num_images N] [--out_dir DIR] [--repeat R]
                                           [--trials T]

Compares (a) a naive Python generator (PIL decode, numpy, per-class one-hot in
Python loops, as a hand-written keras Sequence often does), (b) tfseg on
PNG, (c) tfseg on TFRecords (encoded and raw), (d) a decode-only upper bound
(parallel read + PNG decode of image and label to uint8, nothing else), plus a
per-stage breakdown of the PNG pipeline. Prints a table and one JSON line.

Every pipeline is timed as the training loop iterates it: one iterator over
``dataset.repeat()``, after a one-pass warm-up (a fresh iterator per pass
would time tf.data's start-up and autotuning too). Each is measured once per
trial, in an order rotated each trial, and medians over the trials are
reported, so that load from other processes hits all of them alike. Besides
images/s, each row gives the process CPU time per image: it tells where the
work goes. The stage rows are cumulative pipelines (read; + decode;
+ augment; + batch = the real ``build_dataset``, i.e. the tfseg_png row), and
"+CPU ms" is what each stage adds per image.

The tfseg rows run what training should run: ``build_dataset_with_stats``,
i.e. with the unknown-label-id count on. The throughput targets (``TARGETS``) are
checked against the medians and marked met/MISSED in the table and the JSON line
(the exit status stays 0: a benchmark on a shared machine informs, it does
not gate).
"""

import gc
import itertools
import json
import os
import tempfile
import time

import refusal  # beside this file

refusal.quiet_tensorflow()

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from PIL import Image  # noqa: E402

from tfseg.data import (DataConfig, DataStats, build_dataset_with_stats,  # noqa: E402
                        cityscapes, pairs_dataset, read_tfrecords, transforms,
                        write_synthetic_cityscapes, write_tfrecords)
from tfseg.data.pairs import decode_pairs  # noqa: E402

AUTOTUNE = tf.data.AUTOTUNE
# "Clearly faster": a margin well beyond the trial-to-trial spread on a shared machine.
CLEARLY_FASTER = 1.2
# (JSON key, threshold, description): the throughput targets, each met when its ratio is
# >= threshold: tfseg's PNG pipeline far faster than a naive generator and near the
# decode-only bound, TFRecords clearly faster than PNG.
TARGETS = (
    ("png_vs_naive", 5.0, "tfseg PNG >= 5x naive generator"),
    ("png_vs_decode_only", 0.9, "tfseg PNG >= 0.9x decode-only bound"),
    ("tfrecord_vs_png", CLEARLY_FASTER, f"TFRecord (encoded) >= {CLEARLY_FASTER}x PNG"),
    ("tfrecord_raw_vs_png", CLEARLY_FASTER, f"TFRecord (raw) >= {CLEARLY_FASTER}x PNG"),
)


def naive_generator(pairs, batch_size):
    """What a typical hand-written generator does, per image, in Python."""
    batch_x, batch_y = [], []
    for image_path, label_path in pairs:
        image = np.asarray(Image.open(image_path).convert("RGB"), np.float32) / 127.5 - 1.0
        ids = np.asarray(Image.open(label_path))
        train_ids = np.full(ids.shape, 255, np.uint8)
        for label_id, train_id in cityscapes.LABEL_ID_TO_TRAIN_ID.items():
            train_ids[ids == label_id] = train_id
        onehot = np.zeros(ids.shape + (cityscapes.NUM_CLASSES,), np.float32)
        for k in range(cityscapes.NUM_CLASSES):
            onehot[..., k] = train_ids == k
        batch_x.append(image)
        batch_y.append(onehot)
        if len(batch_x) == batch_size:
            yield np.stack(batch_x), np.stack(batch_y)
            batch_x, batch_y = [], []


def images_per_second(make_iterator, per_element, images, warmup):
    """Time ``images`` images from one endless iterator, after ``warmup`` elements.

    Each element holds ``per_element`` images. One iterator over a repeated
    dataset, as the training loop iterates (``dataset.repeat()``): a new
    iterator per pass would also time tf.data's start-up and autotuning ramp,
    which training pays once.

    Returns:
      (images/s, CPU ms/image).
    """
    iterator = make_iterator()
    for _ in range(warmup):
        next(iterator)
    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(images // per_element):
        next(iterator)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    # A live iterator keeps prefetching in the background and would steal CPU
    # from the next pipeline's timing.
    del iterator
    gc.collect()
    return images / wall, cpu * 1e3 / images


def endless(dataset):
    return lambda: iter(dataset.repeat())


def endless_naive(pairs, batch_size):
    return lambda: itertools.chain.from_iterable(
        naive_generator(pairs, batch_size) for _ in itertools.count())


def stage_datasets(source, config):
    """Cumulative pipelines: read -> +decode -> +augment (+ batch: ``build_dataset``)."""
    files = pairs_dataset(source.pairs)
    read = files.map(lambda i, l: (tf.io.read_file(i), tf.io.read_file(l)),
                     num_parallel_calls=AUTOTUNE)
    decoded, finish = decode_pairs(files, source, stats=DataStats(), deterministic=False)
    seeds = tf.data.Dataset.random(seed=0).batch(2)

    def augment(example, seed):
        return transforms.train_transform(example[0], example[1], seed, config.crop_size,
                                          map_label=finish)

    augmented = tf.data.Dataset.zip(decoded, seeds).map(augment, num_parallel_calls=AUTOTUNE,
                                                        deterministic=False)
    return dict(read=read, decode=decoded, augment=augmented)


def decode_only(source):
    """Upper bound: parallel read + PNG decode of both files, nothing else."""
    return pairs_dataset(source.pairs).map(
        lambda i, l: (tf.io.decode_png(tf.io.read_file(i), channels=3),
                      tf.io.decode_png(tf.io.read_file(l), channels=1)),
        num_parallel_calls=AUTOTUNE, deterministic=False).prefetch(AUTOTUNE)


def main():
    parser = refusal.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_images", type=int, default=16)
    parser.add_argument("--out_dir", default=None,
                        help="data folder (default: a temp folder per --num_images)")
    parser.add_argument("--repeat", type=int, default=6, help="passes timed per trial")
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--crop", type=int, nargs=2, default=(512, 1024))
    parser.add_argument("--trials", type=int, default=5, help="side-by-side rounds (medians)")
    args = parser.parse_args()
    n, crop, batch = args.num_images, tuple(args.crop), args.batch_size
    usable = n // batch * batch
    # Per N: the synthetic writer refuses a folder holding a set of another size.
    args.out_dir = args.out_dir or os.path.join(tempfile.gettempdir(), f"tfseg_bench_input_{n}")

    start = time.perf_counter()
    root = write_synthetic_cityscapes(os.path.join(args.out_dir, "png"), n, 0, 1024, 2048, seed=0)
    source = cityscapes.source(root, "train")
    records = {}
    for raw in (False, True):
        out = os.path.join(args.out_dir, "tfrecord_raw" if raw else "tfrecord")
        if not _readable_shards(out):
            write_tfrecords(source, out, "train", num_shards=4, raw=raw)
        records[raw] = out
    print(f"data ready in {time.perf_counter() - start:.1f}s ({n} images, 1024x2048) "
          f"under {args.out_dir}; {os.cpu_count()} CPUs")

    def config(dataset, data_root):
        return DataConfig(dataset=dataset, root=data_root, crop_size=crop, batch_size=batch,
                          seed=0)

    # Datasets are built (traced) once, outside the timing, as in training.
    png_ds = build_dataset_with_stats(config("cityscapes", root), True)[0]
    record_ds = build_dataset_with_stats(config("tfrecord", records[False]), True)[0]
    raw_ds = build_dataset_with_stats(config("tfrecord", records[True]), True)[0]
    bound_ds = decode_only(source)
    # name: (endless iterator, images per element, images timed, warm-up elements).
    # The tf.data warm-up is one pass, for autotuning to settle.
    pipelines = {
        "naive_python": (endless_naive(source.pairs, batch), batch, usable, 1),
        "tfseg_png": (endless(png_ds), batch, usable * args.repeat, usable // batch),
        "tfseg_tfrecord": (endless(record_ds), batch, usable * args.repeat, usable // batch),
        "tfseg_tfrecord_raw": (endless(raw_ds), batch, usable * args.repeat, usable // batch),
        "decode_only": (endless(bound_ds), 1, n * args.repeat, n),
    }
    for name, ds in stage_datasets(source, config("cityscapes", root)).items():
        pipelines["stage_" + name] = (endless(ds), 1, n * args.repeat, n)
    runs = {name: [] for name in pipelines}
    names = list(pipelines)
    for trial in range(args.trials):
        # Rotated each trial: the pipeline timed right after another (above
        # all the naive generator's big numpy buffers) runs a little slower.
        for name in names[trial % len(names):] + names[:trial % len(names)]:
            runs[name].append(images_per_second(*pipelines[name]))
    runs["stage_batch"] = runs["tfseg_png"]  # the last stage is the whole pipeline
    rate = {k: float(np.median([r for r, _ in v])) for k, v in runs.items()}
    cpu = {k: float(np.median([c for _, c in v])) for k, v in runs.items()}
    stages = [k[len("stage_"):] for k in runs if k.startswith("stage_")]
    results = {k: rate[k] for k in runs if not k.startswith("stage_")}

    print(f"\n{'pipeline':<22}{'images/s':>10}{'CPU ms/img':>12}{'vs naive':>10}"
          f"{'vs decode-only':>16}")
    for name in results:
        print(f"{name:<22}{rate[name]:>10.2f}{cpu[name]:>12.1f}"
              f"{rate[name] / rate['naive_python']:>9.1f}x"
              f"{rate[name] / rate['decode_only']:>15.2f}x")
    print(f"\n{'stage (cumulative)':<22}{'images/s':>10}{'CPU ms/img':>12}{'+CPU ms':>10}")
    previous = 0.0
    for name in stages:
        c = cpu["stage_" + name]
        print(f"{name:<22}{rate['stage_' + name]:>10.2f}{c:>12.1f}{c - previous:>+10.1f}")
        previous = c
    print(f"(medians of {args.trials} side-by-side trials)")
    ratios = dict(
        png_vs_naive=results["tfseg_png"] / results["naive_python"],
        png_vs_decode_only=results["tfseg_png"] / results["decode_only"],
        tfrecord_vs_png=results["tfseg_tfrecord"] / results["tfseg_png"],
        tfrecord_raw_vs_png=results["tfseg_tfrecord_raw"] / results["tfseg_png"],
    )
    targets = {key: dict(value=round(ratios[key], 3), threshold=threshold,
                         met=bool(ratios[key] >= threshold))
               for key, threshold, _ in TARGETS}
    print(f"\n{'target':<40}{'measured':>10}  status")
    for key, _, text in TARGETS:
        print(f"{text:<40}{ratios[key]:>9.2f}x  {'met' if targets[key]['met'] else 'MISSED'}")
    print(json.dumps(dict(
        num_images=n, crop=list(crop), batch_size=batch, repeat=args.repeat,
        trials=args.trials, cpus=os.cpu_count(),
        images_per_s={k: round(v, 3) for k, v in results.items()},
        cpu_ms_per_image={k: round(cpu[k], 2) for k in results},
        trials_images_per_s={k: [round(r, 2) for r, _ in runs[k]] for k in results},
        stages_images_per_s={k: round(rate["stage_" + k], 3) for k in stages},
        stages_cpu_ms_per_image={k: round(cpu["stage_" + k], 2) for k in stages},
        png_vs_decode_only_cpu=round(cpu["decode_only"] / cpu["tfseg_png"], 3),
        **{k: round(v, 3) for k, v in ratios.items()},
        targets=targets,
        all_targets_met=all(t["met"] for t in targets.values()),
    )))


def _readable_shards(out):
    """Whether ``out`` holds shards this tfseg reads (older ones lack record counts)."""
    try:
        read_tfrecords(out, "train")
        return True
    except (FileNotFoundError, ValueError):
        return False

if __name__ == "__main__":
    main()
