"""Plain model parallelism: each part of a functional model on its own device.

As in the article tfseg follows (a classifier too big for one card, its backbone and
half of its last layer on GPU 0, the other half on GPU 1): TF's own placement
(`tf.device`) runs each layer on its part's device, the tensors that cross a cut are
copied by TF, and one optimizer updates every variable where it lives (Keras builds
an optimizer's slots beside their variable). One device computes at a time: this
buys memory, not speed. No scheduler, no pipeline.
"""

import keras
import tensorflow as tf

from tfseg import keras_graph
from tfseg.memory.graph import Graph


def device_names(devices):
    """The full names of `devices` ("GPU:1", "/gpu:1", "CPU:0", ...), checked against
    this process's logical devices; a ValueError names any that does not exist. TF's
    soft placement would otherwise put its variables somewhere else, silently."""
    def key(name):
        spec = tf.DeviceSpec.from_string(name)
        return (spec.device_type or "").upper(), spec.device_index

    known = {key(d.name): d.name for d in tf.config.list_logical_devices()}
    full = []
    for device in devices:
        name = known.get(key(device if "/" in device else f"/device:{device}"))
        if name is None:
            raise ValueError(f"no device {device!r} here; there are "
                             f"{', '.join(n.split('device:')[-1] for n in known.values())}")
        full.append(name)
    return full


class PlacedModel(keras.Model):
    """A functional model whose layers run on the devices `placement` names.

    Args:
      inputs, outputs: the functional graph (another model's: the layers and their
        variables are shared, so every variable path is the same).
      placement: {layer name: device}; a layer it does not name runs where the
        caller's scope says.

    The variables must already live on their layer's device (`place` moves them).
    Gradients follow the layers only when they are taken with `tf.gradients`, which
    colocates each gradient op with its forward op; `tf.GradientTape` puts them all
    on the default device (`tfseg.training.step` takes the former for a `PlacedModel`).
    """

    def __init__(self, inputs, outputs, placement, name=None):
        super().__init__(inputs=inputs, outputs=outputs, name=name)
        self.placement = dict(placement)
        self._device_of = {id(node.operation): self.placement[node.operation.name]
                           for node in Graph(self).nodes
                           if node.operation.name in self.placement}

    @property
    def devices(self):
        """The devices it uses, in the order of its parts."""
        return list(dict.fromkeys(self.placement.values()))

    def call(self, inputs, training=None, mask=None):
        inputs = self._standardize_inputs(inputs)

        def operation_fn(operation):
            def run(*args, **kwargs):
                if training is not None and getattr(operation, "_call_has_training_arg", False):
                    kwargs["training"] = training
                with tf.device(self._device_of.get(id(operation))):
                    return operation(*args, **kwargs)
            return run

        return self._run_through_graph(inputs, operation_fn=operation_fn)


def place(model, parts, devices):
    """`model` as a `PlacedModel` with `parts[k]` (`tfseg.split.parts.Part`s, in order) on
    `devices[k]` (full device names, `device_names`).

    Each variable of a part is made again on its device with its value (Keras variables
    keep their identity and path; only the TF variable inside is new), so do this
    before an optimizer or a checkpoint is built for the model.
    """
    if len(parts) != len(devices):
        raise ValueError(f"{len(parts)} parts, {len(devices)} devices")
    operations = {node.operation.name: node.operation for node in Graph(model).nodes}
    placement = {}
    for part, device in zip(parts, devices):
        for name in part.layers:
            placement[name] = device
            for variable in getattr(operations[name], "weights", ()):
                with tf.device(device):
                    # Keras' own initialisation of a variable from a value, made again under
                    # the device scope; the value crosses from the old device.
                    keras_graph.remake_variable(variable, variable.numpy())
    return PlacedModel(model.input, model.output, placement, name=model.name)
