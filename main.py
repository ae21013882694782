"""tfseg command line: train, evaluate, predict and export DeepLabv3+ segmentation models.

Flags are defined and read here only. Each is a field of ``tfseg.config.Config``
(name, default, help), and they become one frozen ``Config``, which is all the
library sees. To add a mode, write ``def run_<mode>(config)``, add it to ``MODES``
here and its name to ``tfseg.config.MODES``.

    python main.py                       # train the synthetic default, then evaluate it
    python main.py --mode=eval           # mIoU of the latest checkpoint in --model_dir
    python main.py --flagfile=flags/cityscapes_xception65_os16_fullres.flags
"""

import os
import signal
import sys

from tfseg.runtime.signals import StopRequest

# SIGTERM/SIGINT are caught from the first moment of a run (absl's and TensorFlow's
# imports included): a signal in any phase (set-up, training, evaluation) ends the run
# cleanly, after what there was to save is saved (``_exit_if_stopped``).
STOP = StopRequest()
if __name__ == "__main__":
    STOP.__enter__()  # for the whole process: there is nothing to restore at its end

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import app, flags  # noqa: E402

# None of these imports TensorFlow: --mode=validate runs without it.
from tfseg.config import Config, flag_table  # noqa: E402
from tfseg.config.names import BUILTIN_BACKBONE, RECOMPUTE_HEAD  # noqa: E402
from tfseg.errors import InputError, NonFiniteLoss  # noqa: E402


# The modes that honour STOP between steps; the others end at once on a signal, as usual.
STOPPABLE = ("train_and_eval", "train", "eval")


def _exit_if_stopped(finished=True):
    """After a signal, exit now: with 0 when what the run had to keep is kept (training
    saved), else with the shell's 128 + the signal's number (nothing was done)."""
    if STOP:
        # Saved, logged and unlocked: exit now. A normal exit would first wind down the
        # input pipeline's threads and TF's runtime, which can outlast a cluster manager's
        # grace period before SIGKILL (~30 s).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0 if finished else 128 + signal.Signals[STOP.signal].value)


def run_train(config):
    from tfseg.train import loop

    record = None
    # Split across devices, the budget is each device's: the split's own planner checks it.
    if config.run.memory_budget_gb and not config.run.model_devices:
        config, record = _memory_plan(config)
        _exit_if_stopped(finished=False)  # a signal while planning: nothing trained yet
    loop.train(config, stop=STOP, record=record)
    _exit_if_stopped()


def _memory_plan(config):
    """The run with the fastest plan that fits --memory_budget_gb (printed), and the
    plan for its config.json."""
    import tensorflow as tf

    from tfseg import plan
    from tfseg.evaluation.loading import num_classes
    from tfseg.runtime import files

    gpus = len(tf.config.list_physical_devices("GPU"))
    # MirroredStrategy() takes every GPU, else the CPU: one replica each
    config, choice = plan.plan_run(config, num_classes(config), gpus > 0,
                                   saved=files.load_config(config.run.model_dir),
                                   replicas=max(1, gpus))
    print(choice.line(), flush=True)
    return config, {"memory_plan": choice.to_dict()}


def run_eval(config):
    from tfseg.evaluation import evaluate

    evaluate.evaluate(config, stop=STOP)
    # A stopped evaluation wrote nothing: not a success for --mode=eval. In
    # train_and_eval the training before it is saved, which is what a stop keeps.
    _exit_if_stopped(finished=config.run.mode == "train_and_eval")


def run_train_and_eval(config):
    run_train(config)  # exits at once if stopped: no evaluation then
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
    from tfseg.runtime import builders

    run = config.run
    out_dir = run.tfrecord_dir or os.path.join(config.data.root, "tfrecords")
    for training in (True, False):
        source = builders.source(config, training)
        split = config.data.train_split if training else config.data.eval_split
        shards = data.write_tfrecords(source, out_dir, split, run.tfrecord_shards,
                                      run.tfrecord_raw, config.data.skip_bad_examples)
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
    from tfseg.profile.step import StepConfig

    # The step --mode=train with these flags runs: model, crop, batch, dtype policy,
    # strategy, jit, optimizer, weight decay (and its type) and class weights.
    step = StepConfig(run=config, num_classes=num_classes(config), timed_steps=1)
    run = config.run
    out_dir = run.report_dir or os.path.join(run.model_dir, "report")
    result = report.run(
        report.ReportConfig(
            step=step,
            variants=run.report_variants,
            repeats=run.report_repeats,
            memory_budget_gb=run.memory_budget_gb or None,
            frontier=True,
            device_overhead_gb=run.device_overhead_gb,
            # Another backbone has only the head's segments (None: Xception-65's default).
            recompute_blocks=config.model.recompute or (
                None if config.model.backbone == BUILTIN_BACKBONE else RECOMPUTE_HEAD),
            verify_plan=run.report_verify_seconds > 0,
            max_verify_seconds=run.report_verify_seconds,
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


def define_flags():
    """One flag per setting of ``tfseg.config.Config``: name, default, help and list shape
    are the field's."""
    defaults = Config().flat()
    define = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer, float: flags.DEFINE_float,
              str: flags.DEFINE_string}
    for name, (_, field) in flag_table().items():
        default, help_ = defaults[name], field.metadata["help"]
        if field.metadata["items"]:
            flags.DEFINE_list(name, [str(v) for v in default], help_)
        else:
            define[type(default)](name, default, help_)


define_flags()
FLAGS = flags.FLAGS


def config_from_flags():
    """The one place where flags become a ``Config``."""
    config = Config.from_flags({name: FLAGS[name].value for name in flag_table()})
    if config.run.init_checkpoint and config.run.mode not in ("validate", "convert"):
        from tfseg.runtime import init

        # Before adapt, which would take the checkpoint's Xception-65 settings.
        backbone, path = config.model.backbone, config.run.init_checkpoint
        if backbone != BUILTIN_BACKBONE and init.resolve(path)[1] == init.RESEARCH_DEEPLAB:
            raise InputError(f"--init_checkpoint: {path} is a research/deeplab xception_65 "
                             f"checkpoint, for --backbone={BUILTIN_BACKBONE}; --backbone="
                             f"{backbone} starts from --backbone_weights")
        # What the checkpoint implies (width, middle units, conventions) for every
        # setting that no flag or flagfile gave.
        given = {name for name in flag_table() if FLAGS[name].present}
        config = init.adapt(config, given)
    return config


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
        if config.run.mode not in STOPPABLE:
            _exit_if_stopped(finished=False)  # a signal during start-up
            STOP.__exit__()  # Python's default handling from here on
        MODES[config.run.mode](config)
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
