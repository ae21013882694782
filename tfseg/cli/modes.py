"""What each ``--mode`` does with the config: one function per mode, in ``MODES``.

A mode is a function of the one frozen ``Config`` (the library never reads flags),
registered with ``@mode``. Each imports TensorFlow's side of tfseg when it runs:
``--mode=validate`` imports none of it. To add a mode, see CONTRIBUTING.md.

Example:
    from tfseg.cli import modes
    from tfseg.config import Config
    modes.MODES["validate"](Config())   # prints the config as JSON
"""

import os
import signal
import sys

from tfseg import api, recipes
from tfseg.cli import stderr_filter
from tfseg.config.names import BUILTIN_BACKBONE, RECOMPUTE_HEAD
from tfseg.runtime.signals import StopRequest

# SIGTERM/SIGINT are caught from the first moment of a run (``tfseg.cli.main.run``
# enters it before TensorFlow's import): a signal in any phase ends the run cleanly,
# after what there was to save is saved (``exit_if_stopped``).
STOP = StopRequest()
# The modes that honour STOP between steps; the others end at once on a signal, as usual.
STOPPABLE = ("train_and_eval", "train", "eval", "report")
# The modes that run without TensorFlow (the command imports it for the others).
NO_TENSORFLOW = ("validate", "recipes")
MODES = {}
# The settings (flag names) the command's flags or flagfile gave, which main sets; None:
# not known (a mode called from Python), then those that differ from the defaults.
GIVEN = None


def _print(message):
    print(message, flush=True)


def mode(name):
    """Registers ``function(config)`` as ``--mode=name``."""
    def register(function):
        MODES[name] = function
        return function
    return register


def exit_if_stopped(finished=True):
    """After a signal, exit now: with 0 when what the run had to keep is kept (training
    saved), else with the shell's 128 + the signal's number (nothing was done)."""
    if STOP:
        # Saved, logged and unlocked: exit now. A normal exit would first wind down the
        # input pipeline's threads and TF's runtime, which can outlast a cluster manager's
        # grace period before SIGKILL (~30 s).
        sys.stdout.flush()
        sys.stderr.flush()
        stderr_filter.stop()
        os._exit(0 if finished else 128 + signal.Signals[STOP.signal].value)


@mode("train_and_eval")
def run_train_and_eval(config):
    run_train(config)  # exits at once if stopped: no evaluation then
    run_eval(config)
    _print(next_steps(config))


def next_steps(config):
    """What to try after a trained and evaluated run: each command reads the run's
    config.json, so --model_dir is all they need."""
    run = f" --model_dir={config.run.model_dir}"
    return "\n".join([
        "next:",
        f"  tfseg --mode=predict{run} --input_path=IMAGE_OR_FOLDER   # class maps, overlays",
        f"  tfseg --mode=export{run}    # SavedModel and model.keras in "
        f"{os.path.join(config.run.model_dir, 'export')}",
        f"  tensorboard --logdir={config.run.model_dir}    # loss, learning rate, samples",
        "  tfseg --help    # every mode and flag; train on your data: README.md"])


@mode("train")
def run_train(config):
    result = api.train(config, stop=STOP, log=_print)
    # Stopped while choosing settings for --memory_budget_gb: nothing was trained.
    exit_if_stopped(finished=result["step"] is not None)


@mode("eval")
def run_eval(config):
    api.evaluate(config, stop=STOP, log=_print)
    # A stopped evaluation wrote nothing: not a success for --mode=eval. In
    # train_and_eval the training before it is saved, which is what a stop keeps.
    exit_if_stopped(finished=config.run.mode == "train_and_eval")


@mode("predict")
def run_predict(config):
    # --model_dir=runs/synthetic given is checked against --model_path's classes.
    api.predict(config, log=_print, given=GIVEN)


@mode("export")
def run_export(config):
    api.export(config, log=_print)


@mode("report")
def run_report(config):
    """Stock vs memory-saving vs recompute, measured side by side for the training
    step these flags describe (crop size, batch, model, dtype, strategy, optimizer,
    weight decay, class weights, jit)."""
    from tfseg import report
    from tfseg.evaluation.loading import num_classes
    from tfseg.profile.measure import Stopped
    from tfseg.profile.step import StepConfig

    step = StepConfig(run=config, num_classes=num_classes(config), timed_steps=1)
    run = config.run
    out_dir = run.report_dir or os.path.join(run.model_dir, "report")
    try:
        result = report.run(_report_config(config, step, out_dir), log=_print, stop=STOP)
    except Stopped:
        _print(f"{STOP.signal}: report stopped before a variant was measured; nothing written")
        exit_if_stopped(finished=False)
    print(report.render.table(result))
    partial = " (partial: stopped)" if result.get("partial") else ""
    print(f"wrote {out_dir}/report.json, report.md, parts.png, parts_stacked.png{partial}", flush=True)
    # Stopped: what was measured is written, the rest is not: the shell's 128 + signal.
    exit_if_stopped(finished=False)


def _report_config(config, step, out_dir):
    """The `tfseg.report.ReportConfig` of `config`'s flags."""
    from tfseg import report

    run = config.run
    return report.ReportConfig(
        step=step,
        variants=run.report_variants,
        repeats=run.report_repeats,
        memory_budget_gb=run.memory_budget_gb or None,
        frontier=run.report_frontier,
        device_overhead_gb=run.device_overhead_gb,
        # Another backbone has only the head's segments (None: Xception-65's default).
        recompute_blocks=config.model.recompute or (
            None if config.model.backbone == BUILTIN_BACKBONE else RECOMPUTE_HEAD),
        verify_sizes=run.report_verify_seconds > 0,
        max_verify_seconds=run.report_verify_seconds,
        max_minutes=run.report_max_minutes or None,
        out_dir=out_dir,
    )


@mode("convert")
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
        print(f"{split}: {len(source.pairs):,} pairs -> {len(shards):,} shards in {out_dir} "
              f"({counts['bad_examples']:,} bad pairs skipped, "
              f"{counts['unknown_label_pixels']:,} unknown label pixels mapped to 255)")


@mode("validate")
def run_validate(config):
    """Prints the config that the flags (and flagfiles) make; no TensorFlow."""
    print(config.to_json())


@mode("recipes")
def run_recipes(config):
    """Lists the recipes (``--recipe=NAME``), one line each; no TensorFlow."""
    print(recipes.table())
