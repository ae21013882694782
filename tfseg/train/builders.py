"""Builds the strategy, model, optimizer and data configs that a ``RunConfig`` describes."""

import keras
import tensorflow as tf

from tfseg import data as data_lib
from tfseg.models import deeplab_v3_plus


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
    """The ``tf.distribute`` strategy named by ``config.strategy``.

    "multi_worker" reads the cluster from the ``TF_CONFIG`` environment variable.
    """
    if config.strategy == "one_device":
        gpus = tf.config.list_logical_devices("GPU")
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    if config.strategy == "mirrored":
        return tf.distribute.MirroredStrategy()
    if config.strategy == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    return tf.distribute.get_strategy()


def norm_for(config, strategy_):
    """Batch norm becomes sync batch norm when more than one replica shares a step."""
    if config.norm == "batch" and strategy_.num_replicas_in_sync > 1:
        return "sync_batch"
    return config.norm


def set_dtype_policy(config):
    keras.mixed_precision.set_global_policy(config.dtype_policy)


def model(config, num_classes, norm=None):
    """The DeepLabv3+ of ``config`` (build it under the strategy's scope)."""
    return deeplab_v3_plus(
        num_classes,
        output_stride=config.output_stride,
        norm=norm or config.norm,
        width_multiplier=config.width_multiplier,
        middle_repeats=config.middle_repeats,
        dropout=config.dropout,
        memory_saving=config.memory_saving,
        recompute=tuple(config.recompute) or None,
    )


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
    schedule = WarmupPolyDecay(config.learning_rate, config.train_steps, config.warmup_steps,
                               config.end_learning_rate, config.lr_power)
    decoupled = config.weight_decay if config.weight_decay_type == "decoupled" else 0.0
    sgd = keras.optimizers.SGD(schedule, momentum=config.momentum, weight_decay=decoupled or None)
    if decoupled:
        decayed = {id(v) for v in decayed_kernels(model_)}
        sgd.exclude_from_weight_decay(
            var_list=[v for v in model_.trainable_variables if id(v) not in decayed])
    if config.dtype_policy == "mixed_float16":
        sgd = keras.optimizers.LossScaleOptimizer(sgd)
    # Built now (under the caller's strategy scope): a restore then fills the momentum
    # slots at once, and no variable is created inside the distributed step's tf.cond.
    sgd.build(model_.trainable_variables)
    return sgd


def l2_weight_decay(config, model_):
    """(weight, kernels) of the L2 loss term, or (0.0, []) when decay is decoupled or off."""
    if config.weight_decay_type != "l2" or not config.weight_decay:
        return 0.0, []
    return config.weight_decay, decayed_kernels(model_)


def data_config(config, training, batch_size=None):
    """The ``tfseg.data.DataConfig`` for the training or the evaluation split.

    Only training goes through ``--data_service``: evaluation reads every image
    once, in file order, in-process (a service in "parallel_epochs" mode would
    hand each worker its own full epoch).
    """
    return data_lib.DataConfig(
        dataset=config.dataset,
        root=config.data_dir,
        split=config.train_split if training else config.eval_split,
        crop_size=tuple(config.crop_size),
        batch_size=batch_size or (config.batch_size if training else 1),
        scale_range=tuple(config.scale_range),
        jitter=config.jitter,
        cache=config.cache and training,
        cache_max_gb=config.cache_max_gb,
        deterministic=config.deterministic,
        skip_bad_examples=config.skip_bad_examples,
        data_service=(config.data_service or None) if training else None,
        seed=config.seed,
    )


def source(config, training=False):
    """The data set's ``Source`` (files, class names, palette) for a split."""
    return data_lib.get_source(data_config(config, training))
