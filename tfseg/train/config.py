"""``RunConfig``: every setting of a train / eval / predict / export run, in one frozen value.

main.py turns its absl flags into one of these once; library code only ever
sees this value. Validation lives here, and every message names the flag
(``--crop_size``) so that the command line can print it as a one-line usage error.
"""

import dataclasses
import json
from typing import Optional, Tuple

from tfseg.errors import InputError

NORMS = ("batch", "sync_batch", "group")
STRATEGIES = ("default", "one_device", "mirrored", "multi_worker")
DTYPE_POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
EVAL_MODES = ("whole", "sliding", "multiscale")
WEIGHT_DECAY_TYPES = ("l2", "decoupled")
# tfseg.models.xception.RECOMPUTABLE and tfseg.data.DATASETS, repeated because
# importing either imports TensorFlow and --mode=validate must not
# (tests/train/test_config.py keeps them equal).
RECOMPUTE_BLOCKS = ("entry_block1", "entry_block3", "middle", "exit_block1", "exit_block2")
DATASETS = ("cityscapes", "voc", "camvid", "synthetic", "tfrecord")


def crop_ok(size, output_stride):
    """The crop rule: each side is a multiple of the output stride, or one more.

    "multiple + 1" (513, 769) is research/deeplab's corner-aligned convention,
    "multiple" (1024x2048) is Cityscapes' full size. Other sizes work but leave
    a ragged feature-map edge, which costs accuracy for nothing.
    """
    return size >= output_stride and size % output_stride in (0, 1)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One run of the command line.

    Data: ``dataset`` / ``data_dir`` / ``train_split`` / ``eval_split`` go to
    ``tfseg.data.DataConfig``; ``crop_size`` is (height, width) and
    ``batch_size`` the global batch (split over replicas).

    Model: as ``tfseg.models.deeplab_v3_plus``; ``recompute`` is a tuple of
    block names.

    Optimisation: SGD with ``momentum``, poly decay (power ``lr_power``) from
    ``learning_rate`` to ``end_learning_rate`` over ``train_steps``, after
    ``warmup_steps`` of linear warm-up. ``class_weights`` (one per class, or
    empty) weight each pixel's cross-entropy by its label.
    ``weight_decay_type`` "l2" adds ``weight_decay / 2 * sum(kernel ** 2)`` to
    the loss, as research/deeplab's ``l2_regularizer`` does, so the decay's
    gradient passes through momentum; "decoupled" is the optimizer's
    ``kernel -= lr * weight_decay * kernel``. With momentum m, L2 decays
    about 1 / (1 - m) times (10x at 0.9) as fast as decoupled at the same value.
    Both skip depthwise kernels (research/deeplab's ``regularize_depthwise=False``),
    norm parameters and biases.

    ``data_service`` ("grpc://HOST:PORT", or "" for in-process), ``deterministic``
    and ``skip_bad_examples`` go to the training ``DataConfig``.

    Run: ``checkpoint_every`` steps between checkpoints, ``keep_checkpoints``
    kept; ``log_every`` steps between TensorBoard scalars and progress lines;
    ``eval_every`` steps between whole-image mIoU evaluations during training (0: none).
    ``max_skipped_updates`` consecutive updates skipped by the loss-scale optimizer
    (``mixed_float16``: non-finite gradients) stop the run with exit code 3.
    ``eval_mode`` is "whole", "sliding" (``eval_crop`` windows every
    ``eval_stride`` pixels) or "multiscale" (``eval_scales`` plus flips).
    """

    mode: str = "train"
    dataset: str = "synthetic"
    data_dir: str = "data/synthetic"
    model_dir: str = "runs/synthetic"
    train_split: str = "train"
    eval_split: str = "val"
    crop_size: Tuple[int, int] = (128, 128)
    batch_size: int = 8
    scale_range: Tuple[float, float] = (0.5, 2.0)
    jitter: bool = False
    cache: bool = False
    cache_max_gb: float = 4.0
    seed: Optional[int] = 0
    data_service: str = ""
    deterministic: bool = False
    skip_bad_examples: bool = False

    output_stride: int = 16
    norm: str = "batch"
    width_multiplier: float = 0.25
    middle_repeats: int = 2
    dropout: float = 0.1
    memory_saving: bool = False
    recompute: Tuple[str, ...] = ()
    dtype_policy: str = "float32"
    jit_compile: bool = False

    train_steps: int = 1500
    learning_rate: float = 0.05
    end_learning_rate: float = 0.0
    lr_power: float = 0.9
    warmup_steps: int = 50
    momentum: float = 0.9
    weight_decay: float = 4e-5
    weight_decay_type: str = "l2"
    class_weights: Tuple[float, ...] = ()

    strategy: str = "default"
    checkpoint_every: int = 250
    keep_checkpoints: int = 3
    log_every: int = 25
    num_summary_images: int = 2
    eval_every: int = 0
    max_skipped_updates: int = 50

    checkpoint: str = ""
    eval_mode: str = "whole"
    eval_crop: Tuple[int, int] = (129, 129)
    eval_stride: Tuple[int, int] = (86, 86)
    eval_scales: Tuple[float, ...] = (0.75, 1.0, 1.25)
    eval_flip: bool = True
    input_path: str = ""
    output_dir: str = ""
    export_dir: str = ""
    # report: the budget to plan for (0: no planner) and where the files go
    # (default MODEL_DIR/report)
    memory_budget_gb: float = 0.0
    report_verify_seconds: float = 300.0
    report_dir: str = ""
    # convert: where the train and eval splits' shards go (default DATA_DIR/tfrecords)
    tfrecord_dir: str = ""
    tfrecord_shards: int = 16
    tfrecord_raw: bool = False

    def __post_init__(self):
        def check(ok, flag, message):
            if not ok:
                raise InputError(f"--{flag}: {message}")

        check(self.dataset in DATASETS, "dataset",
              f"must be one of {', '.join(DATASETS)}, got {self.dataset!r}")
        check(len(self.scale_range) == 2 and 0 < self.scale_range[0] <= self.scale_range[1],
              "scale_range", f"must be MIN,MAX with 0 < MIN <= MAX, got "
              f"{','.join(map(str, self.scale_range))}")
        check(not self.data_service or self.data_service.startswith("grpc://"), "data_service",
              f"must look like grpc://HOST:PORT, got {self.data_service!r}")
        check(self.cache_max_gb > 0, "cache_max_gb", "must be > 0")
        check(self.batch_size >= 1, "batch_size", f"must be >= 1, got {self.batch_size}")
        check(self.output_stride in (8, 16, 32), "output_stride",
              f"must be 8, 16 or 32, got {self.output_stride}")
        check(len(self.crop_size) == 2 and all(crop_ok(s, self.output_stride)
                                               for s in self.crop_size),
              "crop_size", f"{'x'.join(map(str, self.crop_size))} does not fit output stride "
              f"{self.output_stride}: each side must be a multiple of it or one more "
              f"(e.g. 513, 769, 1024)")
        check(self.norm in NORMS, "norm", f"must be one of {NORMS}, got {self.norm!r}")
        check(self.strategy in STRATEGIES, "strategy", f"must be one of {STRATEGIES}")
        check(self.dtype_policy in DTYPE_POLICIES, "dtype_policy",
              f"must be one of {DTYPE_POLICIES}")
        check(self.eval_mode in EVAL_MODES, "eval_mode", f"must be one of {EVAL_MODES}")
        for block in self.recompute:
            check(block in RECOMPUTE_BLOCKS, "recompute",
                  f"unknown block {block!r}; choose from {RECOMPUTE_BLOCKS}")
        check(self.train_steps >= 1, "train_steps", "must be >= 1")
        check(self.learning_rate > 0, "learning_rate", "must be > 0")
        check(0 <= self.end_learning_rate <= self.learning_rate, "end_learning_rate",
              "must be >= 0 and at most --learning_rate")
        check(self.lr_power > 0, "lr_power", "must be > 0")
        check(0 <= self.momentum < 1, "momentum", f"must be in [0, 1), got {self.momentum}")
        check(self.weight_decay >= 0, "weight_decay", "must be >= 0")
        check(self.weight_decay_type in WEIGHT_DECAY_TYPES, "weight_decay_type",
              f"must be one of {WEIGHT_DECAY_TYPES}, got {self.weight_decay_type!r}")
        check(self.max_skipped_updates >= 1, "max_skipped_updates", "must be >= 1")
        # Keras compiles only the replica step, never strategy.run with apply_gradients
        # inside tf.cond; that combination is untested here (no multi-GPU machine).
        check(not (self.jit_compile and self.strategy in ("mirrored", "multi_worker")),
              "jit_compile", f"is not supported with --strategy={self.strategy}; use "
              f"--strategy=default or one_device, or drop --jit_compile")
        check(0 <= self.dropout < 1, "dropout", f"must be in [0, 1), got {self.dropout}")
        check(0 <= self.warmup_steps < self.train_steps, "warmup_steps",
              "must be >= 0 and smaller than --train_steps")
        check(self.checkpoint_every >= 1, "checkpoint_every", "must be >= 1")
        check(self.keep_checkpoints >= 1, "keep_checkpoints", "must be >= 1")
        check(self.log_every >= 1, "log_every", "must be >= 1")
        check(self.eval_every >= 0, "eval_every", "must be >= 0 (0: no evaluation in training)")
        check(self.num_summary_images >= 0, "num_summary_images", "must be >= 0")
        check(all(w >= 0 for w in self.class_weights), "class_weights", "must be >= 0")
        check(len(self.eval_crop) == 2 and min(self.eval_crop) >= 1, "eval_crop",
              "must be HEIGHT,WIDTH")
        check(len(self.eval_stride) == 2 and
              all(0 < s <= c for s, c in zip(self.eval_stride, self.eval_crop)),
              "eval_stride", "must be positive and at most --eval_crop (windows must overlap "
              "or touch)")
        check(self.eval_scales and min(self.eval_scales) > 0, "eval_scales", "must be > 0")
        check(self.width_multiplier > 0, "width_multiplier", "must be > 0")
        check(self.middle_repeats >= 1, "middle_repeats", "must be >= 1")
        check(self.memory_budget_gb >= 0, "memory_budget_gb", "must be >= 0")
        check(self.report_verify_seconds >= 0, "report_verify_seconds", "must be >= 0")
        check(self.tfrecord_shards >= 1, "tfrecord_shards", "must be >= 1")
        check(self.mode != "convert" or self.dataset != "tfrecord", "dataset",
              "convert reads an image data set (cityscapes, voc, camvid or synthetic), "
              "not tfrecord")

    def to_json(self):
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)
