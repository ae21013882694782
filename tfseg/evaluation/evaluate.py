"""The eval run: a checkpoint's metrics on the evaluation split, as JSON, CSV and TensorBoard;
and ``PeriodicEval``, the cheap whole-image mIoU that training logs every ``--eval_every`` steps."""

import json
import os
import time

import tensorflow as tf

from tfseg import data as data_lib
from tfseg.evaluation.inference import InferenceConfig, Predictor
from tfseg.evaluation.loading import load_model
from tfseg.evaluation.metrics import SegmentationMetrics
from tfseg.train import builders

EVAL_JSON = "eval.json"
CONFUSION_CSV = "confusion.csv"
EVAL_SUBDIR = "eval"


def inference_config(config):
    return InferenceConfig(mode=config.eval_mode, crop=tuple(config.eval_crop),
                           stride=tuple(config.eval_stride), scales=tuple(config.eval_scales),
                           flip=config.eval_flip)


def _step_of(path):
    """The training step saved in checkpoint ``path`` (0 for one saved without it)."""
    reader = tf.train.load_checkpoint(path)
    key = "step/.ATTRIBUTES/VARIABLE_VALUE"
    return int(reader.get_tensor(key)) if reader.has_tensor(key) else 0


def eval_data(config):
    """The evaluation split's ``DataConfig``: whole images at batch 1, so there is no
    padding to mask out."""
    return builders.data_config(config, training=False, batch_size=1)


def run_metrics(predictor, dataset, class_names):
    """(SegmentationMetrics, images, seconds) of ``predictor`` over ``dataset``."""
    metrics = SegmentationMetrics(len(class_names), class_names)
    start, images = time.perf_counter(), 0
    for image, label in data_lib.iterate(dataset):
        metrics.update(label, predictor.classes(image))
        images += 1
    return metrics, images, time.perf_counter() - start


def write_scalars(writer, result, step):
    with writer.as_default():
        tf.summary.scalar("miou", result["miou"], step)
        tf.summary.scalar("pixel_accuracy", result["pixel_accuracy"], step)
    writer.flush()


class PeriodicEval:
    """Whole-image mIoU of the model being trained, on ``config.eval_split``.

    Kept cheap for use inside training: one whole-image pass per image (whatever
    ``--eval_mode`` says), the input pipeline and the traced forward pass built
    once, nothing written but two TensorBoard scalars in ``MODEL_DIR/eval``
    (where the eval run writes its mIoU too, so the points form one curve).
    """

    def __init__(self, config, model, class_names):
        self.dataset = data_lib.build_dataset(eval_data(config), training=False)
        self.predictor = Predictor(model)
        self.class_names = tuple(class_names)
        self.writer = tf.summary.create_file_writer(os.path.join(config.model_dir, EVAL_SUBDIR))

    def __call__(self, step):
        """Evaluates, writes the scalars at ``step``; returns the metrics dict (plus
        "images", "seconds")."""
        metrics, images, seconds = run_metrics(self.predictor, self.dataset, self.class_names)
        result = dict(metrics.result(), images=images, seconds=seconds)
        write_scalars(self.writer, result, step)
        return result


def evaluate(config, log=print):
    """Evaluates the latest checkpoint (or ``config.checkpoint``) on ``config.eval_split``.

    Writes ``model_dir/eval/eval.json`` (mIoU, pixel accuracy, per-class IoU,
    checkpoint, step, mode, images, seconds) and ``confusion.csv`` next to it,
    and the mIoU to TensorBoard (``model_dir/eval``). Returns the eval.json dict.
    """
    model, classes, path, config = load_model(config, log=log)
    predictor = Predictor(model, inference_config(config))
    dataset, data_stats = data_lib.build_dataset_with_stats(eval_data(config), training=False)
    metrics, images, seconds = run_metrics(predictor, dataset, classes.class_names)
    result = {
        **metrics.result(),
        "checkpoint": path,
        "step": _step_of(path),
        "split": config.eval_split,
        "dataset": config.dataset,
        "eval_mode": config.eval_mode,
        "images": images,
        "seconds": round(seconds, 2),
        "data": data_stats.as_dict() if data_stats is not None else None,
    }
    out_dir = os.path.join(config.model_dir, EVAL_SUBDIR)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, EVAL_JSON), "w") as f:
        json.dump(result, f, indent=2)
    metrics.write_confusion_csv(os.path.join(out_dir, CONFUSION_CSV))
    write_scalars(tf.summary.create_file_writer(out_dir), result, result["step"])
    for line in metrics.table():
        log(line)
    if data_stats is not None:
        log(data_stats.summary())
    log(f"{images} images in {seconds:.1f} s; wrote {out_dir}/{EVAL_JSON} and {CONFUSION_CSV}")
    return result
