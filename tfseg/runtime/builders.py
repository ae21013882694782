"""Builds the strategy, model and data configs a ``tfseg.config.Config`` describes (the
optimizer: ``tfseg.training.optim``; a split across devices: ``tfseg.split.plan``)."""

import dataclasses

import keras
import tensorflow as tf

from tfseg import data as data_lib
from tfseg import split as split_lib
from tfseg.config.names import BUILTIN_BACKBONE
from tfseg.errors import InputError
from tfseg.layers import conv_kernels
from tfseg.models import application_backbone, deeplab_v3_plus


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


def jit_mode(config):
    """``--jit_compile`` as the step takes it: "off", "step" or "blocks"; "auto" is
    "blocks" where TensorFlow sees a GPU and "off" on a CPU, whose XLA code is slower
    than oneDNN's (docs/benchmarks.md)."""
    mode = config.run.jit_compile
    if mode == "auto":
        return "blocks" if tf.config.get_visible_devices("GPU") else "off"
    return mode


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
    if config.run.depthwise_kernel == "grouped" and not conv_kernels.has_grouped_gradient():
        raise InputError("--depthwise_kernel=grouped runs on a GPU (cuDNN's grouped "
                         "convolution); TensorFlow sees none here, and its CPU kernels have no "
                         "grouped-conv gradient: give --depthwise_kernel=native or auto")
    kwargs = dataclasses.asdict(config.model)
    name, weights = kwargs.pop("backbone"), kwargs.pop("backbone_weights")
    shards = kwargs.pop("class_shards")
    if training and (shards or config.run.class_devices):
        kwargs.update(class_shards=shards, class_devices=_class_devices(config, num_classes))
        if shards > num_classes:
            raise InputError(f"--class_shards: {shards} shards of {num_classes} classes")
    # The twins' kernel forms, each twin's own setting (tfseg.memory.RewriteOptions').
    kwargs = {**kwargs, "norm": norm or kwargs["norm"], "fused_norm": config.run.fused_norm,
              "depthwise_kernel": config.run.depthwise_kernel, **overrides}
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
