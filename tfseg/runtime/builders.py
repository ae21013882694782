"""Builds the strategy, model, optimizer and data configs a ``tfseg.config.Config`` describes."""

import dataclasses

import keras
import tensorflow as tf

from tfseg import data as data_lib
from tfseg import split as split_lib
from tfseg.config.budget import GB
from tfseg.config.names import BUILTIN_BACKBONE
from tfseg.errors import InputError
from tfseg.layers import fused_norm
from tfseg.models import application_backbone, deeplab_v3_plus
from tfseg.runtime import device as device_lib
from tfseg.split import cuts


class WarmupPolyDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 over ``warmup_steps``, then Keras' ``PolynomialDecay``.

    Keras 3's ``PolynomialDecay`` has no warm-up (only ``CosineDecay`` has), so
    this wraps it; the decay runs over the steps after the warm-up.
    """

    def __init__(self, learning_rate, train_steps, warmup_steps=0, end_learning_rate=0.0,
                 power=0.9):
        self.learning_rate = learning_rate
        self.train_steps = train_steps
        self.warmup_steps = warmup_steps
        self.end_learning_rate = end_learning_rate
        self.power = power
        self.poly = keras.optimizers.schedules.PolynomialDecay(
            learning_rate, max(train_steps - warmup_steps, 1), end_learning_rate, power=power)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warm = self.learning_rate * (step + 1.0) / max(self.warmup_steps, 1)
        decayed = self.poly(tf.maximum(step - self.warmup_steps, 0.0))
        return tf.where(step < self.warmup_steps, warm, decayed)

    def get_config(self):
        return dict(learning_rate=self.learning_rate, train_steps=self.train_steps,
                    warmup_steps=self.warmup_steps, end_learning_rate=self.end_learning_rate,
                    power=self.power)


def strategy(config):
    """The ``tf.distribute`` strategy named by ``config.run.strategy``.

    "multi_worker" reads the cluster from the ``TF_CONFIG`` environment variable.
    """
    name = config.run.strategy
    if name == "one_device":
        gpus = tf.config.list_logical_devices("GPU")
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    return tf.distribute.get_strategy()


def norm_for(config, strategy_):
    """Batch norm becomes sync batch norm when more than one replica shares a step."""
    if config.model.norm == "batch" and strategy_.num_replicas_in_sync > 1:
        return "sync_batch"
    return config.model.norm


def set_dtype_policy(config):
    keras.mixed_precision.set_global_policy(config.run.dtype_policy)


def model(config, num_classes, norm=None, training=False, **overrides):
    """The DeepLabv3+ of ``config.model`` (build it under the strategy's scope), with
    ``norm`` instead of the configured one if given (``norm_for``) and ``overrides`` of
    ``deeplab_v3_plus``'s other arguments (e.g. ``recompute_layer``).

    ``training``: with ``class_shards`` or ``class_devices``, the many-class head
    (``tfseg.layers.ShardedLogits``); otherwise (evaluation, export) the stock head,
    with the same variables.

    ``config.model.backbone`` other than Xception-65 is built here
    (``application_backbone``: dilated to the output stride, with
    ``backbone_weights`` loaded) and passed as ``deeplab_v3_plus``'s ``backbone``.
    """
    fused_norm.use(config.run.fused_norm)  # the batch-norm twins' form, read as they trace
    kwargs = dataclasses.asdict(config.model)
    name, weights = kwargs.pop("backbone"), kwargs.pop("backbone_weights")
    shards = kwargs.pop("class_shards")
    if training and (shards or config.run.class_devices):
        kwargs.update(class_shards=shards, class_devices=_class_devices(config, num_classes))
        if shards > num_classes:
            raise InputError(f"--class_shards: {shards} shards of {num_classes} classes")
    kwargs = {**kwargs, "norm": norm or kwargs["norm"], **overrides}
    if name != BUILTIN_BACKBONE:
        kwargs["middle_repeats"] = None  # Xception-65's; the config refuses another value
        kwargs["backbone"] = application_backbone(name, output_stride=kwargs["output_stride"],
                                                  weights=weights or None)
    return deeplab_v3_plus(num_classes, **kwargs)


def _class_devices(config, num_classes):
    devices = config.run.class_devices
    if not devices:
        return None
    try:
        devices = split_lib.device_names(devices)
    except ValueError as error:
        raise InputError(f"--class_devices: {error}") from None
    if len(devices) > num_classes:
        raise InputError(f"--class_devices: {len(devices)} devices for {num_classes} classes")
    return devices


def split(config, model_, loss_fn, log=print):
    """``model_`` split across ``config.run.model_devices`` (``tfseg.split``), or itself
    without them. Build it first, and the optimizer and checkpoints after.

    The cuts balance the predicted per-device peak of a training step at the run's crop
    and batch (traced, not run), which is printed; with ``--memory_budget_gb`` (less
    the device overhead) a device predicted over it stops the run with one line.
    """
    run = config.run
    if not run.model_devices:
        return model_
    try:
        devices = split_lib.device_names(run.model_devices)
    except ValueError as error:
        raise InputError(f"--model_devices: {error}") from None
    parts = split_lib.parts(model_)
    if len(devices) > len(parts):
        raise InputError(f"--model_devices: {len(devices)} devices for the {len(parts)} parts "
                         f"of {model_.name}; give at most {len(parts)}")
    (height, width), batch = config.data.crop_size, config.data.batch_size
    kept = cuts.kept_by_layer(model_, tf.TensorSpec((batch, height, width, 3)),
                              tf.TensorSpec((batch, height, width), tf.int32), loss_fn)
    loads = cuts.balance(
        cuts.part_costs(parts, kept, slots=1 if config.optim.momentum else 0), devices)
    room = 0
    if run.memory_budget_gb:
        # Logical CPU devices share the host's memory: no overhead. GPU:0's stands for
        # each GPU's: all run the same libraries.
        gpu = all("GPU" in device for device in devices)
        overhead = (device_lib.overhead(run.device_overhead_gb).bytes
                    if gpu or run.device_overhead_gb >= 0 else 0)
        room = int(run.memory_budget_gb * GB) - overhead
    log(f"{model_.name} split across {len(devices)} devices, {len(parts)} parts:")
    for line in cuts.describe(loads, room, batch):
        log(f"  {line}")
    over = [load for load in loads if room and load.peak > room]
    if over:
        raise InputError(f"--memory_budget_gb: {over[0].device} is predicted to need "
                         f"{over[0].peak / GB:.2f} GiB, over the {room / GB:.2f} GiB left of "
                         f"{run.memory_budget_gb:g}; add a device, or lower the batch or crop")
    return split_lib.place(model_, parts, cuts.assignment(loads))


def decayed_kernels(model_):
    """The variables weight decay applies to: conv and dense kernels, as in research/deeplab.

    Depthwise kernels are left out (research/deeplab's ``regularize_depthwise=False``),
    and so are norm scales/offsets and biases (the 1-D variables).
    """
    depthwise = {id(layer.kernel) for layer in model_._flatten_layers()
                 if isinstance(layer, keras.layers.DepthwiseConv2D)}
    return [v for v in model_.trainable_variables
            if len(v.shape) > 1 and id(v) not in depthwise]


def optimizer(config, model_):
    """Built SGD + momentum on the warm-up/poly schedule.

    With ``weight_decay_type="decoupled"`` the optimizer decays ``decayed_kernels``
    (``variable -= lr * wd * variable``, the same on any number of replicas);
    "l2" is a loss term instead (``step.l2_penalty``), and the optimizer has none.
    Under ``mixed_float16`` the optimizer is wrapped in a ``LossScaleOptimizer``,
    which also skips non-finite updates.
    """
    optim = config.optim
    schedule = WarmupPolyDecay(optim.learning_rate, optim.train_steps, optim.warmup_steps,
                               optim.end_learning_rate, optim.lr_power)
    decoupled = optim.weight_decay if optim.weight_decay_type == "decoupled" else 0.0
    sgd = keras.optimizers.SGD(schedule, momentum=optim.momentum, weight_decay=decoupled or None)
    if decoupled:
        decayed = {id(v) for v in decayed_kernels(model_)}
        sgd.exclude_from_weight_decay(
            var_list=[v for v in model_.trainable_variables if id(v) not in decayed])
    if config.run.dtype_policy == "mixed_float16":
        sgd = keras.optimizers.LossScaleOptimizer(sgd)
    # Built now (under the caller's strategy scope): a restore then fills the momentum
    # slots at once, and no variable is created inside the distributed step's tf.cond.
    sgd.build(model_.trainable_variables)
    return sgd


def l2_weight_decay(config, model_):
    """(weight, kernels) of the L2 loss term, or (0.0, []) when decay is decoupled or off."""
    if config.optim.weight_decay_type != "l2" or not config.optim.weight_decay:
        return 0.0, []
    return config.optim.weight_decay, decayed_kernels(model_)


def data_config(config, training, batch_size=None):
    """The ``tfseg.data.DataConfig`` of the training or the evaluation split: ``config.data``'s
    settings that the pipeline shares, by name, and per split:

    - the split, and the batch (evaluation: 1 unless ``batch_size``);
    - the in-memory cache and ``--data_service`` for training only: evaluation reads
      every image once, in file order, in-process (a service in "parallel_epochs"
      mode would hand each worker its own full epoch);
    - the run's seed; -1 is fresh randomness (None).
    """
    settings = config.data
    shared = {f.name: getattr(settings, f.name) for f in dataclasses.fields(data_lib.DataConfig)
              if hasattr(settings, f.name)}
    return data_lib.DataConfig(**{
        **shared,
        "split": settings.train_split if training else settings.eval_split,
        "batch_size": batch_size or (settings.batch_size if training else 1),
        "cache": settings.cache and training,
        "data_service": (settings.data_service or None) if training else None,
        "seed": None if config.run.seed < 0 else config.run.seed,
    })


def source(config, training=False):
    """The data set's ``Source`` (files, class names, palette) for a split."""
    return data_lib.get_source(data_config(config, training))
