"""The eval run: a checkpoint's metrics on the evaluation split, as JSON, CSV and TensorBoard."""

import json
import os
import time

import tensorflow as tf

from tfseg import data as data_lib
from tfseg.evaluation.inference import InferenceConfig, Predictor
from tfseg.evaluation.loading import load_model, with_saved_architecture
from tfseg.evaluation.metrics import SegmentationMetrics
from tfseg.train import builders, tensorboard

EVAL_JSON = "eval.json"
CONFUSION_CSV = "confusion.csv"


def inference_config(config):
    return InferenceConfig(mode=config.eval_mode, crop=tuple(config.eval_crop),
                           stride=tuple(config.eval_stride), scales=tuple(config.eval_scales),
                           flip=config.eval_flip)


def _step_of(path):
    """The step number of a checkpoint path "…/ckpt-1500"."""
    try:
        return int(path.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return 0


def evaluate(config, log=print):
    """Evaluates the latest checkpoint (or ``config.checkpoint``) on ``config.eval_split``.

    Writes ``model_dir/eval/eval.json`` (mIoU, pixel accuracy, per-class IoU,
    checkpoint, step, mode, images, seconds) and ``confusion.csv`` next to it,
    and the mIoU to TensorBoard (``model_dir/eval``). Returns the eval.json dict.
    """
    config = with_saved_architecture(config, log)
    model, source, path = load_model(config, log=log)
    predictor = Predictor(model, inference_config(config))
    metrics = SegmentationMetrics(source.num_classes, source.class_names)
    # Batch 1: whole images of any size, no padding to mask out.
    dataset = data_lib.build_dataset(builders.data_config(config, training=False, batch_size=1),
                                     training=False)
    start, images = time.perf_counter(), 0
    for image, label in dataset:
        metrics.update(label, predictor.classes(image))
        images += 1
    seconds = time.perf_counter() - start
    result = {
        **metrics.result(),
        "checkpoint": path,
        "step": _step_of(path),
        "split": config.eval_split,
        "dataset": config.dataset,
        "eval_mode": config.eval_mode,
        "images": images,
        "seconds": round(seconds, 2),
    }
    out_dir = os.path.join(config.model_dir, "eval")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, EVAL_JSON), "w") as f:
        json.dump(result, f, indent=2)
    metrics.write_confusion_csv(os.path.join(out_dir, CONFUSION_CSV))
    with tf.summary.create_file_writer(out_dir).as_default():
        tensorboard.scalar("miou", result["miou"], result["step"])
        tensorboard.scalar("pixel_accuracy", result["pixel_accuracy"], result["step"])
    for line in metrics.table():
        log(line)
    log(f"{images} images in {seconds:.1f} s; wrote {out_dir}/{EVAL_JSON} and {CONFUSION_CSV}")
    return result
