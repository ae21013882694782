"""The split of a training run's model across `--model_devices`: where to cut it, from the
predicted per-device peak of its step, checked against `--memory_budget_gb`.

    model = split_for_run(config, model, loss_fn, overhead=lambda: 0)
"""

import tensorflow as tf

from tfseg.errors import InputError
from tfseg.split import cuts
from tfseg.split.parts import parts as parts_of
from tfseg.split.place import device_names, place
from tfseg.units import GIB


def split_for_run(config, model, loss_fn, overhead, log=print):
    """``model`` split across ``config.run.model_devices``, or itself without them. Build
    it first, and the optimizer and checkpoints after.

    The cuts balance the predicted per-device peak of a training step at the run's crop
    and batch (traced, not run), which is printed; with ``--memory_budget_gb`` (less
    the device overhead) a device predicted over it stops the run with one line.

    Args:
      config: the run's `tfseg.config.Config`.
      model: the built model; loss_fn: the step's loss (its kept tensors count too).
      overhead: () -> bytes of a GPU outside TF's allocator
        (`tfseg.runtime.device.overhead`), called only under a budget on GPUs or with
        `--device_overhead_gb` set.
    """
    run = config.run
    if not run.model_devices:
        return model
    try:
        devices = device_names(run.model_devices)
    except ValueError as error:
        raise InputError(f"--model_devices: {error}") from None
    parts = parts_of(model)
    if len(devices) > len(parts):
        raise InputError(f"--model_devices: {len(devices)} devices for the {len(parts)} parts "
                         f"of {model.name}; give at most {len(parts)}")
    (height, width), batch = config.data.crop_size, config.data.batch_size
    kept = cuts.kept_by_layer(model, tf.TensorSpec((batch, height, width, 3)),
                              tf.TensorSpec((batch, height, width), tf.int32), loss_fn)
    loads = cuts.balance(
        cuts.part_costs(parts, kept, slots=1 if config.optim.momentum else 0), devices)
    room = 0
    if run.memory_budget_gb:
        # Logical CPU devices share the host's memory: no overhead. GPU:0's stands for
        # each GPU's: all run the same libraries.
        gpu = all("GPU" in device for device in devices)
        room = int(run.memory_budget_gb * GIB) - (
            overhead() if gpu or run.device_overhead_gb >= 0 else 0)
    log(f"{model.name} split across {len(devices)} devices, {len(parts)} parts:")
    for line in cuts.describe(loads, room, batch):
        log(f"  {line}")
    over = [load for load in loads if room and load.peak > room]
    if over:
        raise InputError(f"--memory_budget_gb: {over[0].device} is predicted to need "
                         f"{over[0].peak / GIB:.2f} GiB, over the {room / GIB:.2f} GiB left of "
                         f"{run.memory_budget_gb:g}; add a device, or lower the batch or crop")
    return place(model, parts, cuts.assignment(loads))
