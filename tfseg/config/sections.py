"""The config's sections: each field is a setting and a flag (``names.setting``)."""

import dataclasses
from typing import Tuple

from tfseg.config.names import (APPLICATION_BACKBONES, BACKBONES, BUILTIN_BACKBONE, DATASETS,
                                DTYPE_POLICIES, EVAL_MODES, EXPORT_FORMATS, MODES, NORMS,
                                OUTPUT_FORMATS, RECOMPUTE_BLOCKS, RECOMPUTE_HEAD, REPORT_VARIANTS,
                                RESIZE_MODES, STRATEGIES, TFLITE_QUANTIZATIONS,
                                WEIGHT_DECAY_TYPES, check, distinct_devices, finite, folder_ok,
                                one_of, recompute_names, setting, unit_name)
from tfseg.config.registry import phrase


@dataclasses.dataclass(frozen=True)
class Data:
    """The input: the data set, its splits, the training crop, batch and augmentation."""

    dataset: str = setting("synthetic", f"{phrase(DATASETS)}.")
    root: str = setting("data/synthetic", "Data set folder (synthetic: written on first use).",
                        flag="data_dir")
    train_split: str = setting("train", "Training split.")
    eval_split: str = setting("val", "Evaluation split.")
    crop_size: Tuple[int, int] = setting(
        (128, 128), "Training crop HEIGHT,WIDTH (or one size); each a multiple of "
        "--output_stride or one more.", items=(int, 2))
    batch_size: int = setting(8, "Global training batch (over all replicas).")
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
        finite(self)
        one_of(self.dataset, DATASETS, "dataset")
        folder_ok(self.root, "data_dir")
        check(len(self.scale_range) == 2 and 0 < self.scale_range[0] <= self.scale_range[1],
              "scale_range", f"must be MIN,MAX with 0 < MIN <= MAX, got "
              f"{','.join(map(str, self.scale_range))}")
        check(not self.data_service or self.data_service.startswith("grpc://"),
              "data_service", f"must look like grpc://HOST:PORT, got {self.data_service!r}")
        check(self.cache_max_gb > 0, "cache_max_gb", "must be > 0")
        check(self.batch_size >= 1, "batch_size", f"must be >= 1, got {self.batch_size}")
        check(len(self.crop_size) == 2, "crop_size", "must be HEIGHT,WIDTH")


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
        "include_top=False); default: random. Xception-65: --init_checkpoint.")
    output_stride: int = setting(16, "8, 16 or 32.")
    norm: str = setting("batch", "batch, sync_batch or group (batch becomes sync_batch with "
                        "more than one replica).")
    width_multiplier: float = setting(0.25, "Channel width multiplier (1 = full); with a "
                                      "keras.applications --backbone, of the head only.")
    middle_repeats: int = setting(2, "Xception-65's middle-flow units (16 = full).")
    dropout: float = setting(0.1, "Dropout after the ASPP projection.")
    memory_saving: bool = setting(False, "Fused ReLU+depthwise, output-only norms.")
    recompute: Tuple[str, ...] = setting(
        (), "Segments to recompute in the backward pass: backbone blocks (entry_block1, "
        "entry_block3, middle, exit_block1, exit_block2), single middle units (middle_unit3) "
        "or the head's aspp and decoder. --memory_budget_gb chooses them.", items=(str, None))
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
        finite(self)
        check(self.output_stride in (8, 16, 32), "output_stride",
              f"must be 8, 16 or 32, got {self.output_stride}")
        one_of(self.norm, NORMS, "norm")
        check(self.width_multiplier > 0, "width_multiplier", "must be > 0")
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

    train_steps: int = setting(1500, "Total training steps.")
    learning_rate: float = setting(0.05, "Peak learning rate.")
    end_learning_rate: float = setting(0.0, "Learning rate at the last step.")
    lr_power: float = setting(0.9, "Poly decay power.")
    warmup_steps: int = setting(50, "Linear warm-up steps.")
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
        finite(self)
        check(self.train_steps >= 1, "train_steps", "must be >= 1")
        check(self.learning_rate > 0, "learning_rate", "must be > 0")
        check(0 <= self.end_learning_rate <= self.learning_rate, "end_learning_rate",
              "must be >= 0 and at most --learning_rate")
        check(self.lr_power > 0, "lr_power", "must be > 0")
        check(0 <= self.warmup_steps < self.train_steps, "warmup_steps",
              "must be >= 0 and smaller than --train_steps")
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
        finite(self)
        one_of(self.mode, EVAL_MODES, "eval_mode")
        check(len(self.crop) == 2 and min(self.crop) >= 1, "eval_crop", "must be HEIGHT,WIDTH")
        check(len(self.stride) == 2 and all(0 < s <= c for s, c in zip(self.stride, self.crop)),
              "eval_stride", "must be positive and at most --eval_crop (windows must overlap "
              "or touch)")
        check(self.scales and min(self.scales) > 0, "eval_scales", "must be > 0")


@dataclasses.dataclass(frozen=True)
class Run:
    """What runs, where its files go, how it is placed and kept.

    ``checkpoint_every`` steps between checkpoints, ``keep_checkpoints`` kept;
    ``log_every`` steps between progress lines and TensorBoard scalars;
    ``eval_every`` steps between whole-image mIoU evaluations in training (0: none);
    ``max_skipped_updates`` consecutive updates skipped by the loss-scale optimizer
    (``mixed_float16``: non-finite gradients) stop the run with exit code 3.
    """

    mode: str = setting("train_and_eval", f"One of {', '.join(MODES)}.")
    seed: int = setting(0, "Seed of the initial weights, dropout, the input order and its "
                        "augmentation (-1: fresh randomness).")
    model_dir: str = setting("runs/synthetic", "Checkpoints, config.json, TensorBoard logs, "
                             "eval.")
    strategy: str = setting("default", "default, one_device, mirrored or multi_worker "
                            "(cluster from TF_CONFIG).")
    model_devices: Tuple[str, ...] = setting(
        (), "train: split the network across these devices (GPU:0,GPU:1), consecutive parts "
        "on each, cut where the predicted per-device peaks balance (plain model parallelism: "
        "more memory, not more speed); --memory_budget_gb is then per device.",
        items=(str, None))
    class_devices: Tuple[str, ...] = setting(
        (), "train: the split many-class head: the shards of the classes (--class_shards, "
        "at least one per device) on these devices (GPU:0,GPU:1), in consecutive runs; each "
        "shard's logits and gradients stay on its device.",
        items=(str, None))
    dtype_policy: str = setting("float32", "float32, mixed_float16 or mixed_bfloat16.")
    jit_compile: bool = setting(False, "Compile the training step with XLA.")
    fused_norm: str = setting(
        "auto", "--memory_saving's batch norms in training: true runs TF's fused kernels "
        "(FusedBatchNormV3 and its gradient) where they apply (NHWC float32/16/bf16, one "
        "replica, epsilon >= 1.001e-5), false the unfused ops stock Keras runs; both match "
        "stock. auto: fused, measured faster on the CPU; on a GPU also fused until a GPU "
        "measures it.")
    checkpoint_every: int = setting(250, "Steps between checkpoints.")
    keep_checkpoints: int = setting(3, "Checkpoints kept.")
    log_every: int = setting(25, "Steps between progress lines and summaries.")
    num_summary_images: int = setting(2, "Sample predictions logged.")
    eval_every: int = setting(0, "Steps between whole-image mIoU evaluations on --eval_split "
                              "during training, to TensorBoard (0: none).")
    max_skipped_updates: int = setting(50, "Consecutive updates skipped by mixed_float16 "
                                       "loss scaling (non-finite gradients) that stop the run "
                                       "with exit code 3.")
    checkpoint: str = setting("", "eval/predict/export: checkpoint path or name in "
                              "--model_dir (default: latest).")
    init_checkpoint: str = setting(
        "", "Start from these weights: a research/deeplab xception_65 checkpoint or a tfseg "
        "run's (prefix or folder). Weights only (no step, no optimizer state); settings it "
        "implies (width, middle units, conventions) unless given. A checkpoint in "
        "--model_dir wins: that is a resume. eval/predict/export: the model to use when "
        "--model_dir has none.")
    input_path: str = setting("", "predict: an image file or a folder of images.")
    output_dir: str = setting("", "predict: output folder (default: MODEL_DIR/predictions).")
    output_format: str = setting(
        "colour", "predict: colour (NAME_label.png in palette colours and NAME_overlay.png), "
        "train_ids (NAME_label.png, one channel of class ids 0..C-1) or label_ids (NAME.png, "
        "Cityscapes label ids for its benchmark server; Cityscapes runs only).")
    export_dir: str = setting("", "export: output folder (default: MODEL_DIR/export).")
    export_format: Tuple[str, ...] = setting(
        ("saved_model", "keras"), f"export: what to write, any of {', '.join(EXPORT_FORMATS)} "
        "(onnx: the export extra). Each takes uint8 RGB [1,H,W,3] and gives int32 "
        "class ids [1,H,W] (docs/export.md).", items=(str, None))
    export_size: Tuple[int, ...] = setting(
        (), "export: the fixed HEIGHT,WIDTH of a .tflite's input (default: --eval_crop); "
        "the SavedModel and ONNX take any size.", items=(int, None))
    export_logits: bool = setting(False, "export: also output the float32 logits "
                                  "[1,H,W,C] (named logits).")
    tflite_quantization: str = setting(
        "none", f"export: the .tflite's weights: {', '.join(TFLITE_QUANTIZATIONS)} (int8: "
        "weights and activations, calibrated on --calibration_images training images).")
    calibration_images: int = setting(100, "export with --tflite_quantization=int8: training "
                                      "images that calibrate the activations' ranges.")
    overwrite: bool = setting(False, "export/predict: replace a non-empty --export_dir or "
                              "--output_dir that holds a previous export or predictions (the "
                              "new one is built beside it and swapped in whole); without it, "
                              "a non-empty folder is refused.")
    memory_budget_gb: float = setting(
        0.0, "The card's memory in GiB (2^30 bytes). train: run the fastest plan (stock, "
        "--memory_saving, then --recompute segments) whose step fits it, less "
        "--device_overhead_gb; report: also find the largest batch and crop (0: off).")
    device_overhead_gb: float = setting(
        -1.0, "GiB of the card outside TF's allocator (CUDA context, cuDNN/cuBLAS "
        "workspaces), taken off --memory_budget_gb; -1: measured on a GPU (NVML, the gpu "
        "extra), 0 on the CPU. Recorded in config.json and the report.")
    verify_plan: bool = setting(True, "train with --memory_budget_gb: measure one step of a "
                                "plan predicted within 15% of the budget before using it.")
    report_verify_seconds: float = setting(300.0, "report: skip a size-verification run "
                                           "estimated to take longer (0: verify nothing, "
                                           "only predict).")
    report_max_minutes: float = setting(
        10.0, "report with --memory_budget_gb: start no size-verification run that would "
        "end later than this many minutes after the report began; the sizes left are "
        "reported as estimates, marked unverified (0: no bound).")
    report_dir: str = setting("", "report: output folder (default: MODEL_DIR/report).")
    report_variants: Tuple[str, ...] = setting(
        ("stock", "memory_saving", "recompute"), "report: what to measure side by side: "
        "stock, memory_saving, recompute, and what a Keras user would use instead: "
        "keras_remat_full, keras_remat_activations, keras_remat_larger_than, "
        "keras_remat_list_of_layers (keras.RematScope's modes; the last on --recompute's "
        "segments) and tf_recompute_grad (on the same segments).", items=(str, None))
    report_repeats: int = setting(3, "report: fresh processes per variant (the median is "
                                  "reported).")
    tfrecord_dir: str = setting("", "convert: output folder (default: DATA_DIR/tfrecords).")
    tfrecord_shards: int = setting(16, "convert: shards per split.")
    tfrecord_raw: bool = setting(False, "convert: store decoded pixels (about 10x larger, no "
                                 "decode when training) instead of the encoded files.")

    def __post_init__(self):
        finite(self)
        one_of(self.mode, MODES, "mode")
        one_of(self.strategy, STRATEGIES, "strategy")
        one_of(self.dtype_policy, DTYPE_POLICIES, "dtype_policy")
        one_of(self.fused_norm, ("auto", "true", "false"), "fused_norm")  # fused_norm.FORMS
        one_of(self.output_format, OUTPUT_FORMATS, "output_format")
        for name in self.export_format:
            one_of(name, EXPORT_FORMATS, "export_format")
        check(self.export_format, "export_format", "is empty; name at least one format")
        check(len(self.export_size) in (0, 2) and min(self.export_size, default=1) >= 1,
              "export_size", "must be HEIGHT,WIDTH, each >= 1")
        one_of(self.tflite_quantization, TFLITE_QUANTIZATIONS, "tflite_quantization")
        check(self.calibration_images >= 1, "calibration_images", "must be >= 1")
        check(self.model_dir.strip(), "model_dir", "is empty; give the run's folder "
              "(default: runs/synthetic)")
        folder_ok(self.model_dir, "model_dir")
        for name in ("checkpoint_every", "keep_checkpoints", "log_every", "max_skipped_updates",
                     "tfrecord_shards", "report_repeats"):
            check(getattr(self, name) >= 1, name, "must be >= 1")
        check(self.eval_every >= 0, "eval_every", "must be >= 0 (0: no evaluation in training)")
        check(self.num_summary_images >= 0, "num_summary_images", "must be >= 0")
        check(self.memory_budget_gb >= 0, "memory_budget_gb", "must be >= 0")
        check(self.device_overhead_gb >= 0 or self.device_overhead_gb == -1,
              "device_overhead_gb", "must be >= 0, or -1 (the device's default)")
        for name in self.report_variants:
            one_of(name, REPORT_VARIANTS, "report_variants")
        check(self.report_verify_seconds >= 0, "report_verify_seconds", "must be >= 0")
        check(self.report_max_minutes >= 0, "report_max_minutes", "must be >= 0 (0: no bound)")
        check(not self.model_devices or self.strategy == "default", "model_devices",
              f"splits one model across devices and does not combine with "
              f"--strategy={self.strategy} (data parallelism); use --strategy=default")
        check(not (self.model_devices and self.jit_compile), "model_devices",
              "places each part on its device, which XLA's whole-step compilation "
              "(--jit_compile) does not keep; drop --jit_compile")
        distinct_devices(self.model_devices, "model_devices")
        distinct_devices(self.class_devices, "class_devices")
        check(not self.class_devices or self.strategy == "default", "class_devices",
              f"splits the head across devices and does not combine with "
              f"--strategy={self.strategy}; use --strategy=default")
        # Keras compiles only the replica step, never strategy.run with apply_gradients
        # inside tf.cond; that combination is untested here (no multi-GPU machine).
        check(not (self.jit_compile and self.strategy in ("mirrored", "multi_worker")),
              "jit_compile", f"is not supported with --strategy={self.strategy}; use "
              f"--strategy=default or one_device, or drop --jit_compile")


SECTIONS = {"data": Data, "model": Model, "optim": Optim, "eval": Eval, "run": Run}
