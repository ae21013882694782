"""The eval run: a checkpoint's metrics on the evaluation split, as JSON, CSV and TensorBoard
(one set of files per inference setting: ``tfseg.evaluation.results``); and
``PeriodicEval``, the cheap whole-image mIoU that training logs every ``--eval_every`` steps."""

import dataclasses
import datetime
import os
import time

import tensorflow as tf

from tfseg import data as data_lib
from tfseg.errors import InputError
from tfseg.evaluation.inference import InferenceConfig, Predictor
from tfseg.evaluation.loading import load_model, recorded_eval_data
from tfseg.evaluation.metrics import SegmentationMetrics
from tfseg.evaluation.results import (CONFUSION_SUFFIX, result_name, settings, write,
                                      write_scalars)
from tfseg.runtime import builders, files

EVAL_SUBDIR = "eval"


def inference_config(config, **overrides):
    """``config.eval`` as the ``InferenceConfig`` it holds the fields of, with the pass
    sizes of ``config.model`` (its output stride, + 1 for ``align_corners`` resizes)
    and ``overrides`` (``mode="whole"``)."""
    fields = dict(dataclasses.asdict(config.eval),
                  size_multiple=config.model.output_stride,
                  size_plus_one=config.model.resize == "align_corners")
    return InferenceConfig(**{**fields, **overrides})


def eval_data(config):
    """The evaluation split's ``DataConfig``: whole images at batch 1, so there is no
    padding to mask out."""
    return builders.data_config(config, training=False, batch_size=1)


def run_metrics(predictor, dataset, class_names, stop=None, skipping=False):
    """(SegmentationMetrics, images, seconds) of ``predictor`` over ``dataset``, or of the
    images before ``stop`` (a ``StopRequest``) was set; ``skipping``: the dataset skips
    bad files (its ``skip_bad_examples``)."""
    metrics = SegmentationMetrics(len(class_names), class_names)
    start, images = time.perf_counter(), 0
    for image, label in data_lib.iterate(dataset, skipping):
        if stop:
            break
        metrics.update(label, predictor.classes(image))
        images += 1
    return metrics, images, time.perf_counter() - start


class PeriodicEval:
    """Whole-image mIoU of ``model``, being trained, on ``data`` (the ``DataConfig`` of the
    evaluation split, whole images at batch 1: ``eval_data``'s), passed as ``inference``
    says (``inference_config(config, mode="whole")``).

    Kept cheap for use inside training: one whole-image pass per image (whatever
    ``--eval_mode`` says), the input pipeline and the traced forward pass built
    once, nothing written but two TensorBoard scalars in ``model_dir``/eval,
    ``miou/whole`` and ``pixel_accuracy/whole`` (the whole-image eval run's tags, so the
    points form one curve).
    """

    def __init__(self, model, class_names, data, inference, model_dir):
        self.dataset = data_lib.build_dataset(data, training=False)
        self.skipping = data.skip_bad_examples
        self.predictor = Predictor(model, inference)
        self.class_names = tuple(class_names)
        self.writer = tf.summary.create_file_writer(os.path.join(model_dir, EVAL_SUBDIR))

    def __call__(self, step):
        """Evaluates, writes the scalars at ``step``; returns the metrics dict (plus
        "images", "seconds")."""
        metrics, images, seconds = run_metrics(self.predictor, self.dataset, self.class_names,
                                               skipping=self.skipping)
        result = dict(metrics.result(), images=images, seconds=seconds)
        write_scalars(self.writer, result, step, "whole")
        return result


def evaluate(config, log=print, stop=None):
    """Evaluates the latest checkpoint (or ``--checkpoint``) on ``--eval_split``.

    Writes ``model_dir/eval/NAME.json`` (mIoU, pixel accuracy, per-class IoU,
    checkpoint, step, the inference settings, time, images, seconds) and
    ``NAME_confusion.csv`` next to it, and the mIoU to TensorBoard as ``miou/NAME``,
    where NAME names the inference setting (``whole``, ``sliding_129x129_stride86x86``,
    ...: ``tfseg.evaluation.results``), so that each mode's results are kept beside
    the others'. Returns the JSON file's dict, or None when ``stop`` (a
    ``StopRequest``) was set during the evaluation: nothing is written then, since the
    metrics of part of the split would pass for the whole's.
    """
    model, classes, path, config, step = load_model(config, log=log)
    if config.run.checkpoint:  # a trained run's checkpoint (not --init_checkpoint's weights)
        # The data set its config.json records, where no flag names another: not
        # --data_dir's default folder, where the synthetic reader would write a new one.
        run_dir = os.path.dirname(path) or "."
        config = recorded_eval_data(config, files.load_config(run_dir), run_dir)
    predictor = Predictor(model, inference_config(config))
    data = eval_data(config)
    dataset, data_stats = data_lib.build_dataset_with_stats(data, training=False)
    metrics, images, seconds = run_metrics(predictor, dataset, classes.class_names, stop,
                                           data.skip_bad_examples)
    if stop:
        log(f"{stop.signal}: evaluation stopped after {images} images; nothing written")
        return None
    inference = inference_config(config)
    name = result_name(inference)
    result = {
        **metrics.result(),
        "result": name,
        "checkpoint": path,
        "step": step,
        "split": config.data.eval_split,
        "dataset": config.data.dataset,
        "eval_mode": config.eval.mode,
        "inference": settings(inference),
        "evaluated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"),
        "images": images,
        "seconds": round(seconds, 2),
        "data": data_stats.as_dict() if data_stats is not None else None,
    }
    # The numbers first: a folder that cannot be written must not cost them.
    for line in metrics.table():
        log(line)
    if data_stats is not None and data_stats.summary(config.data.eval_split):
        log(data_stats.summary(config.data.eval_split))
    out_dir = os.path.join(config.run.model_dir, EVAL_SUBDIR)
    try:
        json_name = write(out_dir, name, result, metrics)
    except (OSError, tf.errors.OpError) as error:
        reason = getattr(error, "strerror", None) or str(error).splitlines()[0]
        raise InputError(f"--model_dir: evaluated, but could not write {out_dir}: "
                         f"{reason}") from None
    log(f"{images} images in {seconds:.1f} s; wrote {out_dir}/{json_name} and "
        f"{name}{CONFUSION_SUFFIX}")
    return result
