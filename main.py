"""tfseg command line: train, evaluate, predict and export DeepLabv3+ segmentation models.

Flags are defined and read here only: they become one frozen ``RunConfig``,
which is all the library sees. To add a mode, write ``def run_<mode>(config)``
and add it to ``MODES``.

    python main.py                       # train the synthetic default, then evaluate it
    python main.py --mode=eval           # mIoU of the latest checkpoint in --model_dir
    python main.py --flagfile=flags/cityscapes_xception65_os16_fullres.flags
"""

import dataclasses
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import app, flags  # noqa: E402

from tfseg.errors import InputError, NonFiniteLoss  # noqa: E402  (no TensorFlow import)
from tfseg.train.config import RunConfig  # noqa: E402
from tfseg.train.signals import StopRequest  # noqa: E402

DEFAULTS = RunConfig()


def run_train(config):
    # Caught from here on, TensorFlow's import included: a signal at any point of the
    # set-up ends the run cleanly (exit 0) instead of killing it mid-way.
    with StopRequest() as stop:
        from tfseg.train import loop

        result = loop.train(config, stop=stop)
    if result["stopped_by"]:
        # Saved, logged and unlocked: exit now. A normal exit would first wind down the
        # input pipeline's threads and TF's runtime, which took over a minute on a loaded
        # machine, past a cluster manager's grace period before SIGKILL (~30 s).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return result


def run_eval(config):
    from tfseg.evaluation import evaluate

    evaluate.evaluate(config)


def run_train_and_eval(config):
    run_train(config)  # exits at once if stopped by a signal
    run_eval(config)


def run_predict(config):
    from tfseg.evaluation import predict

    predict.predict(config)


def run_export(config):
    from tfseg.evaluation import export

    export.export(config)


def run_convert(config):
    """Writes the train and eval splits as sharded TFRecords (labels already train
    ids); train from them with --dataset=tfrecord --data_dir=THAT_DIR."""
    from tfseg import data
    from tfseg.train import builders

    out_dir = config.tfrecord_dir or os.path.join(config.data_dir, "tfrecords")
    for training in (True, False):
        source = builders.source(config, training)
        split = config.train_split if training else config.eval_split
        shards = data.write_tfrecords(source, out_dir, split, config.tfrecord_shards,
                                      config.tfrecord_raw, config.skip_bad_examples)
        # Counted here, once: training from the shards sees train ids only.
        counts = data.tfrecords.read_metadata(out_dir, split)["conversion_stats"]
        print(f"{split}: {len(source.pairs)} pairs -> {len(shards)} shards in {out_dir} "
              f"({counts['bad_examples']} bad pairs skipped, {counts['unknown_label_pixels']} "
              f"unknown label pixels mapped to 255)")


def run_report(config):
    """Stock vs memory-saving vs recompute, measured side by side for the training
    step these flags describe (crop size, batch, model, dtype, strategy, optimizer,
    weight decay, class weights, jit)."""
    from tfseg import report
    from tfseg.evaluation.loading import num_classes
    from tfseg.profile.measure import StepConfig

    # The step --mode=train with these flags runs: model, crop, batch, dtype policy,
    # strategy, jit, optimizer, weight decay (and its type) and class weights.
    step = StepConfig.from_run_config(config, num_classes(config), timed_steps=1)
    out_dir = config.report_dir or os.path.join(config.model_dir, "report")
    result = report.run(
        report.ReportConfig(
            step=step,
            memory_budget_gb=config.memory_budget_gb or None,
            recompute_blocks=config.recompute or None,
            verify_plan=config.report_verify_seconds > 0,
            max_verify_seconds=config.report_verify_seconds,
            out_dir=out_dir,
        )
    )
    print(report.render.table(result))
    print(f"wrote {out_dir}/report.json, report.md, parts.png")


def run_validate(config):
    """Parses the flags (and flagfiles) into a config and prints it; no TensorFlow."""
    print(config.to_json())


MODES = {
    "train_and_eval": run_train_and_eval,
    "train": run_train,
    "eval": run_eval,
    "predict": run_predict,
    "export": run_export,
    "report": run_report,
    "convert": run_convert,
    "validate": run_validate,
}

d = DEFAULTS
flags.DEFINE_string("mode", "train_and_eval", f"One of {', '.join(MODES)}.")
flags.DEFINE_string("dataset", d.dataset, "synthetic, cityscapes, voc, camvid or tfrecord.")
flags.DEFINE_string("data_dir", d.data_dir, "Data set folder (synthetic: written on first use).")
flags.DEFINE_string("model_dir", d.model_dir, "Checkpoints, config.json, TensorBoard logs, eval.")
flags.DEFINE_string("train_split", d.train_split, "Training split.")
flags.DEFINE_string("eval_split", d.eval_split, "Evaluation split.")
flags.DEFINE_list("crop_size", list(map(str, d.crop_size)),
                  "Training crop HEIGHT,WIDTH (or one size); each a multiple of "
                  "--output_stride or one more.")
flags.DEFINE_integer("batch_size", d.batch_size, "Global training batch (over all replicas).")
flags.DEFINE_list("scale_range", list(map(str, d.scale_range)), "Random scale MIN,MAX.")
flags.DEFINE_bool("jitter", d.jitter, "Photometric jitter.")
flags.DEFINE_bool("cache", d.cache, "Cache decoded training images in memory (refused "
                  "when the split would not fit).")
flags.DEFINE_float("cache_max_gb", d.cache_max_gb, "--cache is refused when the decoded "
                   "training split would take more than this (or than the free memory).")
flags.DEFINE_integer("seed", d.seed, "Data seed (-1: fresh randomness).")
flags.DEFINE_string("data_service", d.data_service, "grpc://HOST:PORT of a tf.data service "
                    "dispatcher for the training input (default: in-process).")
flags.DEFINE_bool("deterministic", d.deterministic, "Fixed element order in the training input "
                  "(reproducible batches with --seed; a little slower).")
flags.DEFINE_bool("skip_bad_examples", d.skip_bad_examples,
                  "Log, count and drop unreadable files instead of stopping.")
flags.DEFINE_integer("output_stride", d.output_stride, "8, 16 or 32.")
flags.DEFINE_string("norm", d.norm, "batch, sync_batch or group (batch becomes sync_batch "
                    "with more than one replica).")
flags.DEFINE_float("width_multiplier", d.width_multiplier, "Channel width multiplier (1 = full).")
flags.DEFINE_integer("middle_repeats", d.middle_repeats, "Middle-flow units (16 = full).")
flags.DEFINE_float("dropout", d.dropout, "Dropout after the ASPP projection.")
flags.DEFINE_bool("memory_saving", d.memory_saving, "Fused ReLU+depthwise, output-only norms.")
flags.DEFINE_list("recompute", list(d.recompute), "Backbone blocks to recompute, e.g. middle.")
flags.DEFINE_string("dtype_policy", d.dtype_policy, "float32, mixed_float16 or mixed_bfloat16.")
flags.DEFINE_bool("jit_compile", d.jit_compile, "Compile the training step with XLA.")
flags.DEFINE_integer("train_steps", d.train_steps, "Total training steps.")
flags.DEFINE_float("learning_rate", d.learning_rate, "Peak learning rate.")
flags.DEFINE_float("end_learning_rate", d.end_learning_rate, "Learning rate at the last step.")
flags.DEFINE_float("lr_power", d.lr_power, "Poly decay power.")
flags.DEFINE_integer("warmup_steps", d.warmup_steps, "Linear warm-up steps.")
flags.DEFINE_float("momentum", d.momentum, "SGD momentum.")
flags.DEFINE_float("weight_decay", d.weight_decay, "Weight decay on conv kernels (not "
                   "depthwise kernels, norms or biases).")
flags.DEFINE_string("weight_decay_type", d.weight_decay_type, "l2: a loss term, as "
                    "research/deeplab (through momentum: ~1/(1-momentum) times stronger); "
                    "decoupled: the optimizer's lr * wd * kernel.")
flags.DEFINE_list("class_weights", [], "One loss weight per class (default: all 1).")
flags.DEFINE_string("strategy", d.strategy, "default, one_device, mirrored or multi_worker "
                    "(cluster from TF_CONFIG).")
flags.DEFINE_integer("checkpoint_every", d.checkpoint_every, "Steps between checkpoints.")
flags.DEFINE_integer("keep_checkpoints", d.keep_checkpoints, "Checkpoints kept.")
flags.DEFINE_integer("log_every", d.log_every, "Steps between progress lines and summaries.")
flags.DEFINE_integer("max_skipped_updates", d.max_skipped_updates, "Consecutive updates "
                     "skipped by mixed_float16 loss scaling (non-finite gradients) that stop "
                     "the run with exit code 3.")
flags.DEFINE_integer("num_summary_images", d.num_summary_images, "Sample predictions logged.")
flags.DEFINE_integer("eval_every", d.eval_every, "Steps between whole-image mIoU evaluations "
                     "on --eval_split during training, to TensorBoard (0: none).")
flags.DEFINE_string("checkpoint", d.checkpoint, "eval/predict/export: checkpoint path or name "
                    "in --model_dir (default: latest).")
flags.DEFINE_string("eval_mode", d.eval_mode, "whole, sliding or multiscale.")
flags.DEFINE_list("eval_crop", list(map(str, d.eval_crop)), "Sliding window HEIGHT,WIDTH.")
flags.DEFINE_list("eval_stride", list(map(str, d.eval_stride)), "Sliding window stride.")
flags.DEFINE_list("eval_scales", list(map(str, d.eval_scales)), "Multi-scale factors.")
flags.DEFINE_bool("eval_flip", d.eval_flip, "Multi-scale: add left-right flips.")
flags.DEFINE_string("input_path", d.input_path, "predict: an image file or a folder of images.")
flags.DEFINE_string("output_dir", d.output_dir, "predict: output folder "
                    "(default: MODEL_DIR/predictions).")
flags.DEFINE_string("export_dir", d.export_dir,
                    "export: output folder (default: MODEL_DIR/export).")
flags.DEFINE_float("memory_budget_gb", d.memory_budget_gb,
                   "report: plan the largest batch and crop that fit this budget (0: skip).")
flags.DEFINE_float("report_verify_seconds", d.report_verify_seconds,
                   "report: skip a plan-verification run estimated to take longer (0: verify "
                   "nothing, only predict).")
flags.DEFINE_string("report_dir", d.report_dir,
                    "report: output folder (default: MODEL_DIR/report).")
flags.DEFINE_string("tfrecord_dir", d.tfrecord_dir,
                    "convert: output folder (default: DATA_DIR/tfrecords).")
flags.DEFINE_integer("tfrecord_shards", d.tfrecord_shards, "convert: shards per split.")
flags.DEFINE_bool("tfrecord_raw", d.tfrecord_raw, "convert: store decoded pixels (about 10x "
                  "larger, no decode when training) instead of the encoded files.")
FLAGS = flags.FLAGS


def _numbers(name, kind, count=None):
    """A list flag as a tuple of ``kind``; one value is repeated to ``count``."""
    values = FLAGS[name].value
    try:
        numbers = tuple(kind(v) for v in values)
    except ValueError:
        raise InputError(f"--{name}: expected numbers, got {','.join(values)!r}") from None
    if count and len(numbers) == 1:
        numbers *= count
    if count and len(numbers) != count:
        raise InputError(f"--{name}: expected {count} values, got {len(numbers)}")
    return numbers


def config_from_flags():
    """The one place where flags become a ``RunConfig``."""
    if FLAGS.mode not in MODES:
        raise InputError(f"--mode: unknown mode {FLAGS.mode!r}; choose from {', '.join(MODES)}")
    lists = dict(crop_size=(int, 2), scale_range=(float, 2), eval_crop=(int, 2),
                 eval_stride=(int, 2), eval_scales=(float, None), class_weights=(float, None))
    values = {}
    for field in dataclasses.fields(RunConfig):
        if field.name in lists:
            values[field.name] = _numbers(field.name, *lists[field.name])
        else:
            values[field.name] = FLAGS[field.name].value
    values["recompute"] = tuple(values["recompute"])
    values["seed"] = None if values["seed"] < 0 else values["seed"]
    return RunConfig(**values)


def _usage_error(message):
    print(f"main.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def parse_flags(argv):
    """absl parsing, but a bad flag is one line on stderr and exit code 2."""
    try:
        return FLAGS(argv)
    except flags.Error as error:
        _usage_error(str(error).splitlines()[0])


def main(argv):
    from absl import logging

    # TF's checkpoint INFO lines would drown the progress bar.
    logging.set_verbosity(logging.WARNING)
    if len(argv) > 1:
        _usage_error(f"unexpected arguments: {' '.join(argv[1:])}")
    try:
        config = config_from_flags()
        MODES[config.mode](config)
        return 0
    except (InputError, OSError) as error:
        # Bad flags, files or checkpoints: one line that names them. Any other
        # exception is a bug and keeps its traceback.
        _usage_error(str(error).splitlines()[0] if str(error) else type(error).__name__)
    except NonFiniteLoss as error:
        print(f"main.py: error: {error}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
