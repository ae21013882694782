"""Runs a check in a fresh process with N logical CPU devices, which TF fixes at start:

    python -m tests.split.on_devices N compare OUTPUT_STRIDE NORM MEMORY_SAVING
    python -m tests.split.on_devices N head
    python -m tests.split.on_devices N main [main.py flags...]

`compare` prints one JSON line; `main` is main.py itself (its exit code, its output).
"""

import json
import runpy
import sys

import numpy as np
import tensorflow as tf

TINY = dict(width_multiplier=0.125, middle_repeats=2, dropout=0.0)


def _logical_cpus(count):
    cpu = tf.config.list_physical_devices("CPU")[0]
    devices = [tf.config.LogicalDeviceConfiguration()] * count
    tf.config.set_logical_device_configuration(cpu, devices)


def compare(devices, output_stride, norm, memory_saving):
    """A model split across `devices` against the same model on one:
    loss, gradients, weights after two SGD steps, and where everything lives."""
    import keras

    from tfseg import split
    from tfseg.models import deeplab_v3_plus
    from tfseg.training.losses import PixelLoss
    from tfseg.training.step import make_train_step

    keras.config.set_floatx("float64")

    def build():
        keras.utils.set_random_seed(0)
        return deeplab_v3_plus(5, output_stride=output_stride, norm=norm,
                               memory_saving=memory_saving, **TINY)

    loss_fn = PixelLoss(class_weights=(1.0, 2.0, 0.5, 1.0, 3.0))
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (2, 97, 129, 3)).astype(np.uint8)
    labels = rng.integers(0, 5, (2, 97, 129)).astype(np.int32)
    labels[0, :30] = 255
    one, placed = build(), build()
    parts = split.parts(placed)
    names = split.device_names(devices)
    # Consecutive runs of parts, as even as the count allows (the cuts `tfseg.split.cuts`
    # chooses are tested on its predictions, tests/split/test_cuts.py, and through main.py).
    wanted = [names[k * len(names) // len(parts)] for k in range(len(parts))]
    placed = split.place(placed, parts, wanted)
    assigned = {name: device for part, device in zip(parts, wanted) for name in part.layers}

    inputs = tf.constant(images, tf.float64) / 127.5 - 1

    @tf.function
    def gradients_of(model):
        loss = loss_fn(labels, model(inputs, training=True))
        return loss, tf.gradients(loss, [v.value for v in model.trainable_variables])

    (loss_one, grads_one), (loss_split, grads_split) = gradients_of(one), gradients_of(placed)
    scale = max(float(tf.reduce_max(tf.abs(g))) for g in grads_one)
    grad_diff = max(float(tf.reduce_max(tf.abs(a - b))) for a, b in zip(grads_one, grads_split))

    after = []
    for model in (one, placed):
        optimizer = keras.optimizers.SGD(0.05, momentum=0.9)
        optimizer.build(model.trainable_variables)
        step = tf.Variable(0, dtype=tf.int64)
        train_step = make_train_step(tf.distribute.get_strategy(), model, optimizer, loss_fn, step)
        losses = [float(train_step((images, labels))[0]) for _ in range(2)]
        after.append((losses, {v.path: v.numpy() for v in model.weights}))
    traced = train_step.get_concrete_function((tf.constant(images), tf.constant(labels))).graph
    backprop = [op.device for op in traced.get_operations() if "Backprop" in op.type]

    layer_of = {w.path: layer.name for layer in placed.layers for w in layer.weights}
    misplaced = [v.path for v in placed.weights
                 if not v.value.device.endswith(assigned[layer_of[v.path]].split("device:")[-1])]
    # Keras builds each momentum slot beside its variable (same shape, same order).
    slots = [v for v in optimizer.variables if "momentum" in v.path]
    slots_misplaced = [w.path for w, v in zip(placed.trainable_variables, slots)
                       if v.value.device != w.value.device or v.shape != w.shape]
    return dict(
        parts=len(parts), devices=sorted({v.value.device.split("device:")[-1]
                                          for v in placed.weights}),
        loss_diff=abs(float(loss_one) - float(loss_split)),
        grad_diff=grad_diff / scale,
        losses=after,
        weight_diff=max(float(np.max(np.abs(value - after[1][1][k])))
                        for k, value in after[0][1].items()),
        update=max(float(np.max(np.abs(after[0][1][k] - v.numpy()))) for k, v in
                   ((w.path, w) for w in build().weights)),
        misplaced=misplaced, slots_misplaced=slots_misplaced, slots=len(slots),
        trainable=len(placed.trainable_variables),
        backprop_devices=sorted({d.split("device:")[-1] for d in backprop}),
        backprop_unplaced=sum(not d for d in backprop),
    )


def head(devices):
    """The split many-class head (one class shard per device) against the stock head:
    the loss, and where the shards' full-size tensors are."""
    import keras

    from tfseg import memory
    from tfseg.models import deeplab_v3_plus
    from tfseg.training import losses
    from tfseg.training.step import make_train_step

    keras.config.set_floatx("float64")
    names = list(devices)

    def build(**kwargs):
        keras.utils.set_random_seed(0)
        return deeplab_v3_plus(13, **TINY, **kwargs)

    stock, split = build(), build(class_devices=names)
    memory.copy_weights(stock, split)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (2, 65, 97, 3)).astype(np.uint8)
    labels = rng.integers(0, 13, (2, 65, 97)).astype(np.int32)
    out = {}
    for name, model in (("stock", stock), ("split", split)):
        optimizer = keras.optimizers.SGD(0.05)
        optimizer.build(model.trainable_variables)
        step = make_train_step(tf.distribute.get_strategy(), model, optimizer,
                               losses.for_model(model), tf.Variable(0, dtype=tf.int64))
        loss, _, predictions = step((images, labels))
        graph = step.get_concrete_function((tf.constant(images), tf.constant(labels))).graph
        full = [t.shape[-1] for op in graph.get_operations() for t in op.outputs
                if t.shape.rank == 4 and tuple(t.shape[1:3]) == (65, 97)]
        out[name] = dict(loss=float(loss), predictions=predictions.numpy().tolist(),
                         widest=max(full), resize_devices=sorted(
                             {op.device.split("device:")[-1] for op in graph.get_operations()
                              if op.type.startswith("ResizeBilinear") and op.outputs[0].shape[-1]
                              in (4, 5)}))
    return dict(devices=names, **out)


def main(argv):
    count, check, *args = argv
    _logical_cpus(int(count))
    if check == "main":
        sys.argv = ["main.py", *args]
        runpy.run_path("main.py", run_name="__main__")
        return
    names = [f"CPU:{i}" for i in range(int(count))]
    if check == "head":
        result = head(names)
        print(json.dumps(result))
        return
    stride, norm, memory_saving = int(args[0]), args[1], args[2] == "1"
    result = compare(names, stride, norm, memory_saving)
    result["losses"] = [losses for losses, _ in result["losses"]]
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
