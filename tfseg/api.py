"""tfseg in Python: ``train``, ``evaluate``, ``predict`` and ``export``, each the same as
the command's ``--mode`` of that name, taking a ``Config`` and keyword overrides.

The overrides are the flags' names (``docs/cli.md``), so what works on the command line
works here: ``tfseg.train(dataset="cityscapes", data_dir="data/cityscapes",
memory_saving=True)`` is ``tfseg --mode=train --dataset=cityscapes ...``. Each is parsed
and checked as its flag is, before anything runs or is written: a Python value
(``train_steps=100``, ``crop_size=(513, 513)``, ``export_format=["tflite"]``,
``model_dir=pathlib.Path(...)``) or the flag's text (``crop_size="513,513"``); a wrong
one is a ``tfseg.errors.InputError`` naming the flag (``--train_steps: must be an
integer, got 2.7``). ``config`` may also be a dict of settings by flag name.

Where TensorFlow is not imported yet, each sets what the command sets before it
(``tfseg.runtime.caches.warm_start``, where the user set nothing): oneDNN's CPU kernels
on (``TF_ENABLE_ONEDNN_OPTS=1``, said in one line; set it to 0 to keep them off) and the
driver's cache size.

Example:
    import tfseg
    result = tfseg.train(train_steps=20, warmup_steps=5, model_dir="runs/try")  # synthetic
    print(tfseg.evaluate(model_dir="runs/try")["miou"])
"""

from collections.abc import Mapping

from tfseg.config import SECTIONS, Config
from tfseg.config.names import RECORDS
from tfseg.errors import InputError


def config_of(config=None, **overrides):
    """``config`` with the settings of ``overrides`` (flag names) replaced, each parsed as
    its flag is (``tfseg.config.values``: ``crop_size=(65, 65)`` or ``"65,65"``).
    ``config``: a ``Config``; a mapping of settings by flag name; a run's config.json as
    ``json.load`` gives it (its sections, ``class_names``, ...), checked as every mode
    checks that file (``Config.check_saved``); or None for the defaults.

    Raises:
      InputError: "--FLAG: why", naming the first bad setting, or "config: FIELD: why"
        for a config.json dict ("config: model.width_multiplier: ..."), before anything
        runs.
      TypeError: a name that is no setting.
    """
    if isinstance(config, Mapping):
        if not all(isinstance(name, str) for name in config):
            raise InputError(f"config: a mapping of settings needs flag names as keys, got "
                             f"{list(config)!r}")
        if any(name in SECTIONS or name in RECORDS for name in config):  # a config.json
            config = Config.check_saved(dict(config), "config", extras=RECORDS)
        else:
            config, overrides = Config(), {**config, **overrides}
    elif config is None:
        config = Config()
    elif not isinstance(config, Config):
        raise InputError(f"config: must be a tfseg.Config or a dict of settings by flag name, "
                         f"got {type(config).__name__}; or pass the settings as keywords "
                         f"(tfseg.export(model_dir=...))")
    return config.replace(**overrides) if overrides else config


def given_of(config=None, **overrides):
    """The flag names of the settings a caller gave: those of ``overrides`` and of a
    mapping ``config``, and those a ``Config`` sets to other than their defaults."""
    if isinstance(config, Mapping):
        named = set(Config.settings_of(config))
    elif isinstance(config, Config):
        default = Config().flat()
        named = {name for name, value in config.flat().items() if value != default[name]}
    else:
        named = set()
    return named | set(overrides)


def before_tensorflow(log=print):
    """What the command sets before TensorFlow's import, where the user set nothing: the
    driver's cache size, and oneDNN on while TensorFlow is not imported
    (``tfseg.runtime.caches.warm_start``). Where it turns oneDNN on, ``log`` gets the line
    the command's device line ends with: "oneDNN on (tfseg's default;
    TF_ENABLE_ONEDNN_OPTS=0 turns it off)"."""
    from tfseg.runtime import caches

    if caches.ONEDNN in caches.warm_start():
        log(caches.onednn_note())


def fit_budget(config, saved, log=print, stop=None):
    """``config`` with the fastest settings that fit ``--memory_budget_gb`` on this
    machine's devices, and the record of the choice (kept in config.json); (``config``,
    None) when ``stop`` was set while planning (the measurement under way is killed).
    ``saved``: the run's config.json dict, whose plan a resumed run keeps."""
    import tensorflow as tf

    from tfseg import budget
    from tfseg.evaluation.loading import recorded_num_classes
    from tfseg.profile.measure import Stopped

    gpus = len(tf.config.list_physical_devices("GPU"))
    try:
        # MirroredStrategy() takes every GPU, else the CPU: one replica each
        config, choice = budget.plan_run(config, recorded_num_classes(config, saved),
                                         saved=saved, replicas=max(1, gpus), stop=stop)
    except Stopped:
        log(f"{stop.signal}: memory planning stopped; nothing written")
        return config, None
    log(choice.line())
    return config, {"memory_plan": choice.to_dict()}


def train(config=None, *, stop=None, log=print, **overrides):
    """Trains ``config`` (resuming from its ``model_dir``) and returns a dict: "step"
    (None if stopped before training began), "loss", "stopped_by", "checkpoint".

    Args:
      config: a ``tfseg.Config`` (default: the synthetic default run).
      stop: a ``tfseg.runtime.signals.StopRequest`` the caller entered, to stop cleanly
        on SIGTERM/SIGINT (default: one of the run's own).
      log: where messages go.
      **overrides: settings by flag name (``train_steps=100``, ``memory_saving=True``).

    Example:
        tfseg.train(train_steps=20, warmup_steps=5, model_dir="runs/try")
    """
    config = config_of(config, **overrides)  # refused before TensorFlow starts
    before_tensorflow(log)
    from tfseg.runtime import xla_cache

    if config.run.jit_compile != "off":  # before TensorFlow reads XLA's flags, as the command
        xla_cache.use(config.run.compile_cache_dir, log)
    from tfseg.runtime import device, files
    from tfseg.training import loop

    # config.json records the device and its overhead (measured on a GPU; a run without
    # a budget needs none, so one NVML cannot measure is recorded as such).
    record = {"device": device.overhead(config.run.device_overhead_gb, required=False).to_dict()}
    # The model folder as the run finds it, read once, before anything is written: its
    # config.json (a resumed run keeps its memory plan, and training checks its settings
    # against it) and whether it holds a checkpoint to resume.
    model_dir = config.run.model_dir
    saved, resuming = files.load_config(model_dir), files.latest_checkpoint(model_dir) is not None
    # Split across devices, the budget is each device's: the split's cuts check it.
    if config.run.memory_budget_gb and not config.run.model_devices:
        config, plan = fit_budget(config, saved, log, stop)
        if stop:
            return dict(step=None, loss=None, stopped_by=stop.signal, checkpoint=None)
        record.update(plan)
    return loop.train(config, saved, resuming, log=log, stop=stop, record=record)


def evaluate(config=None, *, stop=None, log=print, **overrides):
    """mIoU of the latest checkpoint of ``model_dir`` (or ``checkpoint=``) on the eval
    split: the dict written to ``MODEL_DIR/eval/NAME.json`` ("miou", "per_class_iou",
    "pixel_accuracy", "checkpoint", "inference", ...; NAME is the inference setting:
    ``whole.json``, ``sliding_129x129_stride86x86.json``, ...), or None if ``stop`` ended
    it early.

    Example:
        tfseg.evaluate(model_dir="runs/try")["miou"]
    """
    config = config_of(config, **overrides)
    before_tensorflow(log)
    from tfseg.evaluation import evaluate as evaluation

    return evaluation.evaluate(config, log=log, stop=stop)


def predict(config=None, *, log=print, given=None, **overrides):
    """Class maps of ``input_path`` (an image or a folder) written to ``output_dir``;
    returns the paths written. ``given``: the flag names of the settings the caller gave
    (the command's flags; default ``given_of``): an exported ``model_path`` is checked
    against a ``model_dir`` given, even the default ``runs/synthetic``.

    Example:
        tfseg.predict(model_dir="runs/try", input_path="photo.png", output_dir="out")
        tfseg.predict(model_dir="runs/try", model_path="runs/try/tflite/model.tflite",
                      input_path="photo.png", output_dir="out_tflite")
    """
    given = given_of(config, **overrides) if given is None else given
    config = config_of(config, **overrides)
    before_tensorflow(log)
    from tfseg.evaluation import predict as prediction

    classify = None
    if config.run.model_path:  # an exported model: deploy sits above evaluation
        from tfseg.deploy import open_model
        classify = open_model(config.run.model_path)
    return prediction.predict(config, log=log, classify=classify,
                              model_dir_given="model_dir" in given)


def export(config=None, *, log=print, **overrides):
    """The latest checkpoint in each of ``export_format`` (default a SavedModel and a
    ``model.keras``; also ``tflite`` and ``onnx``: uint8 RGB in, int32 classes out), in
    ``export_dir``; returns that folder.

    Example:
        tfseg.export(model_dir="runs/try", export_dir="runs/try/export")
        tfseg.export(model_dir="runs/try", export_dir="runs/try/tflite",
                     export_format=("tflite",), export_size=(97, 129))
    """
    config = config_of(config, **overrides)
    before_tensorflow(log)
    from tfseg import deploy

    return deploy.export(config, log=log)
