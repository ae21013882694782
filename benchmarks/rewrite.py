"""The memory rewrite on models a Keras user brings: keras.applications and keras-hub
task models, stock vs rewritten.

For each model (built with `weights=None`, or from keras-hub's classes with random
weights), one training step (forward, backward, momentum SGD update, sparse softmax
cross-entropy on its classes, per pixel for a segmenter) is
measured in a fresh process per variant and repeat, with the allocator recipe of
`tfseg/profile/measure.py`: a warm-up step, `gc.collect()`, base = current, reset,
one step, peak - base; the median of the repeats. "rewrite" is
`tfseg.memory.rewrite(model)` with its defaults (output-only norms, activations
fused into the next conv, separable blocks, residual folds; weighed at the model's
input shapes where it would keep more than stock); "unweighed" builds every trick found
(`RewriteOptions(weigh=False)`); "untraced" keeps subclassed blocks whole
(`RewriteOptions(trace_blocks=False)`); "weighed" is
`tfseg.memory.rewrite(model, tfseg.memory.paying(model, images))`, the tricks that pay
on that model at that size and batch by its traced step's kept bytes (stock where a
trick does not). Dropout rates are zeroed so the variants run the same maths, but
where a model's masks are drawn alike in both (`KEEP_DROPOUT`).

    python benchmarks/rewrite.py                       # 224x224, batch 8, 3 repeats
    python benchmarks/rewrite.py --models ResNet50 --repeats 1 --size 160
    python benchmarks/rewrite.py --models ConvNeXtTiny hub:SegFormerB0 hub:ViTBase \
        hub:DeepLabV3ResNet50                          # models with a target, each at its size
    python benchmarks/rewrite.py --models NASNetMobile --size 128 --batch 4 \
        --variants stock rewrite weighed               # no model's peak grows
    python benchmarks/rewrite.py --models hub:ViTTi16Dropout --repeats 3  # dropout 0.1

keras-hub models (`hub:` names, at their own size and batch unless --size/--batch are
given) need keras-hub installed (docs/testing.md#keras-hub).

Prints a table (peak over base, ratio to stock, step seconds, the gradients' error against
the same model's float64 maths, `grad_error.py`, and the model's target) and one JSON
line. On the CPU, run with TF_ENABLE_ONEDNN_OPTS=1 (set here for the children):
only oneDNN's allocator keeps statistics.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

import families  # beside this file
import grad_error
import refusal
from tfseg.units import MIB

# The targets: each model's rewritten peak over base at most this ratio to stock's.
TARGETS = {"MobileNetV2": 0.5, "MobileNetV3Large": 0.5, "MobileNetV3Small": 0.5,
           "EfficientNetB0": 0.5, "ResNet50": 0.6, "ConvNeXtTiny": 0.6,
           "hub:SegFormerB0": 0.6, "hub:ViTBase": 0.6, "hub:DeepLabV3ResNet50": 0.55}
MODELS = ("MobileNetV2", "MobileNetV3Large", "EfficientNetB0", "EfficientNetV2B0", "ResNet50",
          "ResNet50V2", "DenseNet121", "Xception")
VARIANTS = ("stock", "rewrite", "weighed", "unweighed", "untraced")


def segformer(keras_hub, size, dims=(32, 64, 160, 256), depths=(2, 2, 2, 2), heads=(1, 2, 5, 8),
              projection=256, classes=19):
    """keras-hub's SegFormer with a MiT encoder (defaults: B0). Its Dense layers are
    named by width, so `dims` must differ from each other."""
    encoder = keras_hub.models.MiTBackbone(
        layerwise_depths=list(depths), num_layers=4, layerwise_num_heads=list(heads),
        layerwise_sr_ratios=[8, 4, 2, 1], max_drop_path_rate=0.0,
        layerwise_patch_sizes=[7, 3, 3, 3], layerwise_strides=[4, 2, 2, 2],
        hidden_dims=list(dims), image_shape=(size, size, 3))
    backbone = keras_hub.models.SegFormerBackbone(image_encoder=encoder,
                                                  projection_filters=projection)
    return keras_hub.models.SegFormerImageSegmenter(backbone=backbone, num_classes=classes)


def vit(keras_hub, size, patch=16, layers=12, heads=12, width=768, mlp=3072, classes=1000,
        dropout=0.0):
    """keras-hub's ViT classifier (defaults: ViT-B/16)."""
    backbone = keras_hub.models.ViTBackbone(
        image_shape=(size, size, 3), patch_size=patch, num_layers=layers, num_heads=heads,
        hidden_dim=width, mlp_dim=mlp, dropout_rate=dropout, attention_dropout=0.0)
    return keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=classes)


def deeplab_v3(keras_hub, size, stem=64, filters=(64, 128, 256, 512), blocks=(3, 4, 6, 3),
               rates=(6, 12, 18), projection=48, classes=21):
    """keras-hub's DeepLabV3 with a ResNet encoder (defaults: ResNet-50; its first
    stage must have 64 filters)."""
    encoder = keras_hub.models.ResNetBackbone(
        input_conv_filters=[stem], input_conv_kernel_sizes=[7],
        stackwise_num_filters=list(filters), stackwise_num_blocks=list(blocks),
        stackwise_num_strides=[1, 2, 2, 2], block_type="bottleneck_block",
        use_pre_activation=False, image_shape=(size, size, 3))
    backbone = keras_hub.models.DeepLabV3Backbone(
        image_encoder=encoder, low_level_feature_key="P2", spatial_pyramid_pooling_key="P5",
        dilation_rates=list(rates), upsampling_size=8, projection_filters=projection,
        image_shape=(size, size, 3))
    return keras_hub.models.DeepLabV3ImageSegmenter(backbone=backbone, num_classes=classes)


def vit_tiny_dropout(keras_hub, size):
    """ViT-Ti/16 with its MLPs' dropout at 0.1, the rate ViT trains with from scratch: its
    masks are drawn alike in both variants (the seed states are copied), so its dropout
    stays on."""
    return vit(keras_hub, size, layers=12, heads=3, width=192, mlp=768, dropout=0.1)


# keras-hub task models: builder, size, batch (those with a target, one with dropout kept on,
# and the model families of `families.py`).
HUB = {"hub:SegFormerB0": (segformer, 512, 2), "hub:ViTBase": (vit, 224, 8),
       "hub:DeepLabV3ResNet50": (deeplab_v3, 512, 2),
       "hub:ViTTi16Dropout": (vit_tiny_dropout, 128, 2), **families.FAMILIES}
# Models measured with their dropout on.
KEEP_DROPOUT = {"hub:ViTTi16Dropout"}


def build(name, size):
    """(model, its outputs are logits)."""
    import keras

    if name in HUB:
        import keras_hub

        return HUB[name][0](keras_hub, size), True
    return getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3)), False


def child(name, variant, size, batch):
    """Measures one variant of one model in this (fresh) process; prints a JSON line."""
    import gc
    import time

    import keras
    import numpy as np
    import tensorflow as tf

    from tfseg import memory
    from tfseg.runtime import device

    keras.utils.set_random_seed(0)
    model, logits = build(name, size)
    for layer in model._flatten_layers():
        if isinstance(layer, keras.layers.Dropout) and name not in KEEP_DROPOUT:
            layer.rate = 0.0
    rng = np.random.RandomState(0)
    images = tf.constant(rng.rand(batch, size, size, 3).astype("float32") * 255)
    stock, options = model, None  # None: every trick
    if variant == "weighed":
        options = memory.paying(model, images)
    elif variant == "unweighed":
        options = memory.RewriteOptions(weigh=False)
    elif variant == "untraced":
        options = memory.RewriteOptions(trace_blocks=False)
    if variant != "stock":
        model = memory.rewrite(model, options)
    optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=logits)
    out_shape = model.compute_output_shape((batch, size, size, 3))
    labels = tf.constant(rng.randint(0, out_shape[-1], out_shape[:-1]))

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    float(step(images, labels))  # warm-up: trace, slots, allocator regions
    gc.collect()
    base = device.memory_info()["current"]  # GPU:0 when there is one, else CPU:0
    device.reset_peak()
    start = time.perf_counter()
    float(step(images, labels))
    seconds = time.perf_counter() - start
    peak = device.memory_info()["peak"] - base
    # What the rewrite changes, in the model and in each model nested in it (keras-hub's
    # task models hold their backbone, whose encoder is a model too).
    changes = str(memory.changes(stock, options)) if variant != "stock" else None
    # After the measurement: the float64 model it is compared with is built then.
    error = None if name in KEEP_DROPOUT else grad_error.gradient_error(
        model, lambda: build(name, size)[0], images, labels, loss_fn)
    print(json.dumps({"model": name, "variant": variant, "peak_over_base_bytes": int(peak),
                      "step_seconds": seconds, "grad_error": error, "changes": changes}))


def _median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def measure(name, variant, size, batch):
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    out = subprocess.run([sys.executable, __file__, "--child", name, variant, str(size),
                          str(batch)], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = refusal.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--size", type=int, default=None, help="default 224 (hub: its own)")
    parser.add_argument("--batch", type=int, default=None, help="default 8 (hub: its own)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=VARIANTS[:2],
                        help="stock first; default: stock rewrite")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        name, variant, size, batch = args.child
        return child(name, variant, int(size), int(batch))
    variants = ["stock"] + [v for v in args.variants if v != "stock"]
    rows = []
    print(f"{'model':<18} " + " ".join(f"{v + ' MiB':>12} {'ratio':>6} {'s':>5} {'g err':>7}"
                                        for v in variants)
          + f" {'target':>7}  status", flush=True)
    for name in args.models:
        _, size, batch = HUB.get(name, (None, 224, 8))
        size, batch = args.size or size, args.batch or batch
        runs = {v: [] for v in variants}
        for _ in range(args.repeats):  # interleaved: a slow stretch hits each alike
            for variant in variants:
                runs[variant].append(measure(name, variant, size, batch))
        peaks = {v: statistics.median(r["peak_over_base_bytes"] for r in runs[v])
                 for v in variants}
        times = {v: statistics.median(r["step_seconds"] for r in runs[v]) for v in variants}
        ratios = {v: peaks[v] / peaks["stock"] for v in variants}
        errors = {v: _median_or_none(r["grad_error"] for r in runs[v]) for v in variants}
        target = TARGETS.get(name)
        judged = ratios.get("rewrite", ratios[variants[-1]])
        status = "" if target is None else ("met" if judged <= target else "missed")
        rows.append({"model": name, "size": size, "batch": batch,
                     "mib": {v: peaks[v] / MIB for v in variants}, "ratio": ratios,
                     "time_ratio": {v: times[v] / times["stock"] for v in variants},
                     "step_seconds": times, "grad_error": errors,
                     "target": target, "status": status,
                     "changes": {v: runs[v][0]["changes"] for v in variants}})
        print(f"{name:<18} " + " ".join(
            f"{peaks[v] / MIB:>12.0f} {ratios[v]:>6.2f} {times[v]:>5.2f} "
            f"{'n/a' if errors[v] is None else format(errors[v], '.1e'):>7}" for v in variants)
              + f" {target or '':>7}  {status}", flush=True)
    print(json.dumps({"benchmark": "rewrite", "repeats": args.repeats, "rows": rows}))


if __name__ == "__main__":
    main()
