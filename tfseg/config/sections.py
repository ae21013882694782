"""The config's sections: each field is a setting and a flag (``names.setting``)."""

import dataclasses
from typing import Tuple

from tfseg.config.names import (APPLICATION_BACKBONES, BACKBONES, BUILTIN_BACKBONE, DATASETS,
                                EVAL_MODES, NORMS, RECOMPUTE_BLOCKS, RECOMPUTE_HEAD, RESIZE_MODES,
                                WEIGHT_DECAY_TYPES, check, folder_ok, one_of,
                                recompute_names, setting, unit_name)
from tfseg.config.registry import phrase
from tfseg.config.run import Run
from tfseg.config.values import parse_fields


@dataclasses.dataclass(frozen=True)
class Data:
    """The input: the data set, its splits, the training crop, batch and augmentation."""

    dataset: str = setting("synthetic", f"{phrase(DATASETS)}.")
    root: str = setting("data/synthetic", "Data set folder (synthetic: written on first use).",
                        flag="data_dir", path=True)
    train_split: str = setting("train", "Training split.")
    eval_split: str = setting("val", "Evaluation split.")
    crop_size: Tuple[int, int] = setting(
        (128, 128), "Training crop HEIGHT,WIDTH (or one size); each a multiple of "
        "--output_stride or one more.", items=(int, 2))
    batch_size: int = setting(4, "Global training batch (over all replicas).")
    scale_range: Tuple[float, float] = setting((0.5, 2.0), "Random scale MIN,MAX.",
                                               items=(float, 2))
    jitter: bool = setting(False, "Photometric jitter.")
    cache: bool = setting(False, "Cache decoded training images in memory (refused when "
                          "the split would not fit).")
    cache_max_gb: float = setting(4.0, "--cache is refused when the decoded training split "
                                  "would take more GB (10^9 bytes) than this, or than the "
                                  "free memory (the container's limit included).")
    data_service: str = setting("", "grpc://HOST:PORT of a tf.data service dispatcher for "
                                "the training input (default: in-process).")
    data_service_timeout: float = setting(30.0, "Seconds to wait for --data_service's "
                                          "dispatcher to answer before stopping (exit 2).")
    deterministic: bool = setting(False, "Fixed element order in the training input "
                                  "(reproducible batches with --seed; a little slower).")
    skip_bad_examples: bool = setting(False, "Log, count and drop unreadable files instead "
                                      "of stopping.")

    def __post_init__(self):
        parse_fields(self)
        one_of(self.dataset, DATASETS, "dataset")
        folder_ok(self.root, "data_dir")
        check(0 < self.scale_range[0] <= self.scale_range[1],
              "scale_range", f"must be MIN,MAX with 0 < MIN <= MAX, got "
              f"{','.join(map(str, self.scale_range))}")
        check(not self.data_service or self.data_service.startswith("grpc://"),
              "data_service", f"must look like grpc://HOST:PORT, got {self.data_service!r}")
        check(self.cache_max_gb > 0, "cache_max_gb", f"must be > 0, got {self.cache_max_gb}")
        check(self.batch_size >= 1, "batch_size", f"must be >= 1, got {self.batch_size}")
        # Before Config's stride rule, which 0 (a multiple of every stride) would pass.
        check(min(self.crop_size) >= 1, "crop_size",
              f"each side must be at least 1, got {','.join(map(str, self.crop_size))}")


@dataclasses.dataclass(frozen=True)
class Model:
    """``tfseg.models.deeplab_v3_plus``'s keyword arguments (the classes come from the data),
    and the backbone it is built on (``tfseg.runtime.builders.model`` builds a
    keras.applications one and passes it as ``backbone=``)."""

    backbone: str = setting(
        BUILTIN_BACKBONE, f"The encoder: {BUILTIN_BACKBONE} (built in) or a keras.applications "
        f"model, dilated to --output_stride: {', '.join(APPLICATION_BACKBONES)}. With the latter, "
        f"--width_multiplier, --norm and --recompute are the ASPP's and decoder's only.")
    backbone_weights: str = setting(
        "", "A keras.applications --backbone's initial weights: imagenet (Keras downloads "
        "them once) or a PATH to a .weights.h5 (save_weights of that model with "
        "include_top=False); default: random. Xception-65: --init_checkpoint.", path=True)
    output_stride: int = setting(16, "8, 16 or 32.")
    norm: str = setting("batch", "batch, sync_batch or group (batch becomes sync_batch with "
                        "more than one replica).")
    width_multiplier: float = setting(0.25, "Channel width multiplier (1 = full); with a "
                                      "keras.applications --backbone, of the head only.")
    middle_repeats: int = setting(2, "Xception-65's middle-flow units (16 = full).")
    dropout: float = setting(0.1, "Dropout after the ASPP projection.")
    memory_saving: bool = setting(False, "Fused ReLU+depthwise, output-only norms.")
    recompute: Tuple[str, ...] = setting(
        (), "Segments to recompute in the backward pass: backbone blocks (entry_stem, "
        "entry_block1, entry_block3, middle, exit_block1, exit_block2), single middle units "
        "(middle_unit3) or the head's aspp and decoder. --memory_budget_gb chooses them.",
        items=(str, None))
    class_shards: int = setting(
        0, "train: the many-class head: the logits' cross-entropy is taken in this many "
        "shards of classes, each made again in the backward pass, so the full-size logits of "
        "all classes never exist (0: the stock head; the same weights either way).")
    # research/deeplab's conventions are head_epsilon=1e-5 and resize=align_corners; a
    # config.json saved before these settings gets the current defaults, the same model.
    head_epsilon: float = setting(1e-3, "Norm epsilon of the ASPP and decoder (the backbone "
                                  "keeps 1e-3); research/deeplab: 1e-5.")
    resize: str = setting("half_pixel", "Bilinear resizes (ASPP pooling, decoder, logits): "
                          "half_pixel or align_corners (TF1, research/deeplab).")
    freeze_batch_norm: bool = setting(
        False, "Fine-tuning: batch norms run in inference mode (fixed moving statistics) with "
        "gamma and beta frozen, as research/deeplab's fine_tune_batch_norm=false; group norm: "
        "gamma and beta frozen, each image still normalised by its own statistics.")

    def __post_init__(self):
        parse_fields(self)
        check(self.output_stride in (8, 16, 32), "output_stride",
              f"must be 8, 16 or 32, got {self.output_stride}")
        one_of(self.norm, NORMS, "norm")
        check(self.width_multiplier > 0, "width_multiplier",
              f"must be > 0, got {self.width_multiplier}")
        check(self.middle_repeats >= 1, "middle_repeats", "must be >= 1")
        check(0 <= self.dropout < 1, "dropout", f"must be in [0, 1), got {self.dropout}")
        check(self.class_shards >= 0, "class_shards", f"must be >= 0, got {self.class_shards}")
        check(self.head_epsilon > 0, "head_epsilon", f"must be > 0, got {self.head_epsilon}")
        one_of(self.resize, RESIZE_MODES, "resize")
        names = recompute_names(self.middle_repeats)
        for block in self.recompute:
            check(block in names, "recompute", f"unknown segment {block!r}; choose from "
                  f"{', '.join(RECOMPUTE_BLOCKS + RECOMPUTE_HEAD)} or "
                  f"{unit_name('middle', 1)}..{unit_name('middle', self.middle_repeats)}")
        one_of(self.backbone, BACKBONES, "backbone")
        if self.backbone == BUILTIN_BACKBONE:
            check(not self.backbone_weights, "backbone_weights", "is for the keras.applications "
                  "backbones; Xception-65 starts from --init_checkpoint (e.g. research/deeplab's "
                  "ImageNet xception_65)")
            return
        # Xception-65's own settings are refused rather than ignored.
        check(self.middle_repeats == type(self).__dataclass_fields__["middle_repeats"].default,
              "middle_repeats", f"counts Xception-65's middle-flow units; --backbone="
              f"{self.backbone} has none: leave it out")
        body = [name for name in self.recompute if name not in RECOMPUTE_HEAD]
        check(not body, "recompute", f"{body[0] if body else ''} is part of Xception-65; with "
              f"--backbone={self.backbone} only the head's {' and '.join(RECOMPUTE_HEAD)} can be "
              f"recomputed")


@dataclasses.dataclass(frozen=True)
class Optim:
    """SGD with ``momentum`` on a poly schedule, the loss's class weights and weight decay.

    The learning rate warms up linearly over ``warmup_steps``, then decays (power
    ``lr_power``) to ``end_learning_rate`` at ``train_steps``. ``weight_decay_type``
    "l2" adds ``weight_decay / 2 * sum(kernel ** 2)`` to the loss, as research/deeplab's
    ``l2_regularizer`` does, so its gradient passes through momentum; "decoupled" is
    the optimizer's ``kernel -= lr * weight_decay * kernel``. With momentum m, L2
    decays about 1 / (1 - m) times (10x at 0.9) as fast. Both skip depthwise kernels
    (research/deeplab's ``regularize_depthwise=False``), norm parameters and biases.

    ``grad_accum_steps`` N sums the gradients of N micro-batches of ``batch_size``
    (each micro-batch is one forward and backward pass, as research/deeplab's and
    PaddleSeg's batch is) before one update, so an update sees N x batch_size images;
    the loss is normalised over the labelled pixels of all N, as for one batch of
    N x batch_size. ``train_steps``, ``warmup_steps`` and the schedule count updates.
    Batch norm in training mode normalises each micro-batch by its own statistics and
    moves its moving averages N times per update; with ``--freeze_batch_norm`` N
    micro-batches give the update of one batch of N x batch_size.
    """

    train_steps: int = setting(1300, "Total training steps.")
    learning_rate: float = setting(0.3, "Peak learning rate.")
    end_learning_rate: float = setting(0.0, "Learning rate at the last step.")
    lr_power: float = setting(0.9, "Poly decay power.")
    warmup_steps: int = setting(25, "Linear warm-up steps.")
    momentum: float = setting(0.9, "SGD momentum.")
    weight_decay: float = setting(4e-5, "Weight decay on conv kernels (not depthwise kernels, "
                                  "norms or biases).")
    weight_decay_type: str = setting(
        "l2", "l2: a loss term, as research/deeplab (through momentum: ~1/(1-momentum) times "
        "stronger); decoupled: the optimizer's lr * wd * kernel.")
    class_weights: Tuple[float, ...] = setting(
        (), "One loss weight per class (default: all 1).", items=(float, None))
    grad_accum_steps: int = setting(
        1, "Micro-batches of --batch_size per update: gradients are summed over N of them, "
        "so an update sees N x --batch_size images (the schedule and --train_steps count "
        "updates). Batch norm's batch statistics are each micro-batch's own (or frozen: "
        "--freeze_batch_norm).")

    def __post_init__(self):
        parse_fields(self)
        check(self.train_steps >= 1, "train_steps", f"must be >= 1, got {self.train_steps}")
        check(self.learning_rate > 0, "learning_rate", f"must be > 0, got {self.learning_rate}")
        check(0 <= self.end_learning_rate <= self.learning_rate, "end_learning_rate",
              "must be >= 0 and at most --learning_rate")
        check(self.lr_power > 0, "lr_power", f"must be > 0, got {self.lr_power}")
        # The default warm-up is longer than a short --train_steps alone: say it is in play.
        default = " (its default)" if self.warmup_steps == type(self).warmup_steps else ""
        check(0 <= self.warmup_steps < self.train_steps, "warmup_steps",
              f"must be >= 0 and smaller than --train_steps={self.train_steps}, got "
              f"{self.warmup_steps}{default}")
        check(0 <= self.momentum < 1, "momentum", f"must be in [0, 1), got {self.momentum}")
        check(self.weight_decay >= 0, "weight_decay", "must be >= 0")
        one_of(self.weight_decay_type, WEIGHT_DECAY_TYPES, "weight_decay_type")
        check(all(w >= 0 for w in self.class_weights), "class_weights", "must be >= 0")
        check(self.grad_accum_steps >= 1, "grad_accum_steps",
              f"must be >= 1, got {self.grad_accum_steps}")


@dataclasses.dataclass(frozen=True)
class Eval:
    """How evaluation turns a whole image into class probabilities
    (``tfseg.evaluation.inference.InferenceConfig``'s fields)."""

    mode: str = setting("whole", "whole, sliding or multiscale.", flag="eval_mode")
    crop: Tuple[int, int] = setting((129, 129), "Sliding window HEIGHT,WIDTH.",
                                    flag="eval_crop", items=(int, 2))
    stride: Tuple[int, int] = setting((86, 86), "Sliding window stride.", flag="eval_stride",
                                      items=(int, 2))
    scales: Tuple[float, ...] = setting((0.75, 1.0, 1.25), "Multi-scale factors.",
                                        flag="eval_scales", items=(float, None))
    flip: bool = setting(True, "Multi-scale: add left-right flips.", flag="eval_flip")

    def __post_init__(self):
        parse_fields(self)
        one_of(self.mode, EVAL_MODES, "eval_mode")
        check(min(self.crop) >= 1, "eval_crop",
              f"each side must be at least 1, got {','.join(map(str, self.crop))}")
        check(all(0 < s <= c for s, c in zip(self.stride, self.crop)),
              "eval_stride", "must be positive and at most --eval_crop (windows must overlap "
              "or touch)")
        check(self.scales and min(self.scales) > 0, "eval_scales", "must be > 0")


SECTIONS = {"data": Data, "model": Model, "optim": Optim, "eval": Eval, "run": Run}
