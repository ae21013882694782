"""The config's ``run`` section: what runs, where its files go, how it is placed and kept."""

import dataclasses
from typing import Tuple

from tfseg.config.names import (DTYPE_POLICIES, EXPORT_FORMATS, JIT_MODES, MODES,
                                OUTPUT_FORMATS, REPORT_VARIANTS, STRATEGIES,
                                TFLITE_QUANTIZATIONS, check, distinct_devices, folder_ok,
                                one_of, setting)
from tfseg.config.values import parse_fields


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
                             "eval.", path=True)
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
    jit_compile: str = setting(
        "off", "XLA for the training step: step compiles the whole step as one computation "
        "(minutes for a large network); blocks compiles each block (a backbone unit, the "
        "ASPP, the decoder, the loss, the update) as its own, forward and backward, so "
        "that a step is a few hundred launches, not thousands of ops; off runs TF's ops "
        "one by one. auto: blocks on a GPU, off on a CPU (where XLA's code is slower "
        "than oneDNN's). --jit_compile is step, --nojit_compile off.",
        aliases={True: "step", False: "off"})
    compile_cache_dir: str = setting(
        "auto", "Where XLA keeps the step's compiled blocks (--jit_compile), so that a "
        "second run of the same shapes starts without compiling: auto is the user's cache "
        "folder (~/.cache/tfseg/xla), off none. A damaged entry is removed and compiled "
        "again; on a nearly full disk the cache is only read.", path=True)
    fused_norm: str = setting(
        "auto", "--memory_saving's batch norms in training: true runs TF's fused kernels "
        "(FusedBatchNormV3 and its gradient) where they apply (NHWC float32/16/bf16, one "
        "replica, epsilon >= 1.001e-5), false the unfused ops stock Keras runs; both match "
        "stock. auto: fused, measured faster on the CPU; on a GPU also fused until a GPU "
        "measures it.")
    depthwise_kernel: str = setting(
        "auto", "--memory_saving's depthwise convs: native runs TensorFlow's depthwise "
        "kernels, grouped the same conv as a Conv2D with one group per channel (cuDNN's "
        "grouped convolution, dilated without a space-to-batch copy; GPU only, checked "
        "against stock by benchmarks/gpu.py's parity). auto: native, until a GPU measures "
        "grouped (benchmarks/dilated.py).")
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
                              "--model_dir (default: latest).", path=True)
    init_checkpoint: str = setting(
        "", "Start from these weights: a research/deeplab xception_65 checkpoint or a tfseg "
        "run's (prefix or folder). Weights only (no step, no optimizer state); settings it "
        "implies (width, middle units, conventions) unless given. A checkpoint in "
        "--model_dir wins: that is a resume. eval/predict/export: the model to use when "
        "--model_dir has none.", path=True)
    input_path: str = setting("", "predict: an image file or a folder of images.", path=True)
    model_path: str = setting(
        "", "predict: run this exported model (a model.tflite, a model.onnx or a SavedModel "
        "folder) instead of --model_dir's checkpoint, with the class names and colours the "
        "file carries (a --model_dir given, even the default, must have the same classes).",
        path=True)
    output_dir: str = setting(
        "", "predict: output folder (default: MODEL_DIR/predictions; with --model_path=DIR/NAME, "
        "DIR_predictions/NAME beside the model's folder, never inside an export folder, "
        "which export --overwrite replaces).", path=True)
    output_format: str = setting(
        "colour", "predict: colour (NAME_label.png in palette colours and NAME_overlay.png), "
        "train_ids (NAME_label.png, one channel of class ids 0..C-1) or label_ids (NAME.png, "
        "Cityscapes label ids for its benchmark server; Cityscapes runs only).")
    export_dir: str = setting("", "export: output folder (default: MODEL_DIR/export).", path=True)
    export_format: Tuple[str, ...] = setting(
        ("saved_model", "keras"), f"export: what to write, any of {', '.join(EXPORT_FORMATS)} "
        "(onnx: the export extra). Each takes uint8 RGB [1,H,W,3] and gives int32 "
        "class ids [1,H,W] (docs/export.md).", items=(str, None))
    export_size: Tuple[int, ...] = setting(
        (), "export: the fixed HEIGHT,WIDTH of a .tflite's input (default: the size the "
        "run's --eval_split images share, else its --crop_size rounded to the nearest size "
        "the model maps exactly; at most what fits in memory to convert); the SavedModel "
        "and ONNX take any size. Every format pads each image to such a size inside, as "
        "eval does.", items=(int, None))
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
        5.0, "report with --memory_budget_gb: start no size-verification run that would "
        "end later than this many minutes after the report began; the sizes left are "
        "reported as estimates, marked unverified (0: no bound).")
    report_frontier: bool = setting(
        True, "report with --memory_budget_gb: also estimate every training plan (stock, "
        "--memory_saving, recompute segments) at the report's size, the frontier chart; "
        "false skips it, which is most of a small report's time.")
    report_dir: str = setting("", "report: output folder (default: MODEL_DIR/report).", path=True)
    report_variants: Tuple[str, ...] = setting(
        ("stock", "memory_saving", "recompute"), "report: what to measure side by side: "
        "stock, memory_saving, recompute, and what a Keras user would use instead: "
        "keras_remat_full, keras_remat_activations, keras_remat_larger_than, "
        "keras_remat_list_of_layers (keras.RematScope's modes; the last on --recompute's "
        "segments) and tf_recompute_grad (on the same segments).", items=(str, None))
    report_repeats: int = setting(3, "report: fresh processes per variant (the median is "
                                  "reported).")
    tfrecord_dir: str = setting("", "convert: output folder (default: DATA_DIR/tfrecords).",
                                path=True)
    tfrecord_shards: int = setting(16, "convert: shards per split.")
    tfrecord_raw: bool = setting(False, "convert: store decoded pixels (about 10x larger, no "
                                 "decode when training) instead of the encoded files.")

    def __post_init__(self):
        parse_fields(self)
        one_of(self.mode, MODES, "mode")
        one_of(self.strategy, STRATEGIES, "strategy")
        one_of(self.dtype_policy, DTYPE_POLICIES, "dtype_policy")
        one_of(self.fused_norm, ("auto", "true", "false"), "fused_norm")  # fused_norm.FORMS
        one_of(self.depthwise_kernel, ("auto", "native", "grouped"),  # conv_kernels.FORMS
               "depthwise_kernel")
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
        one_of(self.jit_compile, JIT_MODES, "jit_compile")
        check(not (self.model_devices and self.jit_compile != "off"), "model_devices",
              "places each part on its device, which XLA's whole-step compilation "
              "(--jit_compile) does not keep; drop --jit_compile")
        check(not (self.class_devices and self.jit_compile != "off"), "class_devices",
              "places each class shard on its device, which XLA's compilation "
              "(--jit_compile) does not keep; drop --jit_compile")
        distinct_devices(self.model_devices, "model_devices")
        distinct_devices(self.class_devices, "class_devices")
        check(not self.class_devices or self.strategy == "default", "class_devices",
              f"splits the head across devices and does not combine with "
              f"--strategy={self.strategy}; use --strategy=default")
        # Keras compiles only the replica step, never strategy.run with apply_gradients
        # inside tf.cond; that combination is untested here (no multi-GPU machine).
        check(not (self.jit_compile != "off" and self.strategy in ("mirrored", "multi_worker")),
              "jit_compile", f"is not supported with --strategy={self.strategy}; use "
              f"--strategy=default or one_device, or drop --jit_compile")
