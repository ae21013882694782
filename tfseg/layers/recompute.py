"""Recompute a block in the backward pass instead of keeping its activations."""

import keras
import tensorflow as tf
from tensorflow.python.eager import record  # stop_recording has no public name

from tfseg.layers.inplace_norm import _gated


@keras.saving.register_keras_serializable(package="tfseg")
class Recompute(keras.layers.Layer):
    """Runs `block` (a single-input, single-output `keras.Model`) and keeps only its
    input for the backward pass, where the block runs again under a tape
    (gradient checkpointing; Chen et al., https://arxiv.org/abs/1604.06174).

    The second run happens inside a `keras.StatelessScope`, so its variable
    assignments (the batch-norm moving statistics) are dropped: they update once
    per step, exactly as without recompute. Blocks must be deterministic in
    training (no dropout). The recompute is gated on the incoming gradient, so TF
    cannot schedule it into the forward pass. XLA ignores control dependencies,
    so under `jit_compile=True` the saving depends on XLA's own scheduling.
    Shapes: those of `block`.
    """

    def __init__(self, block, **kwargs):
        super().__init__(**kwargs)
        random = [l.name for l in block._flatten_layers() if isinstance(l, keras.layers.Dropout)]
        if random:
            # The second run would draw other masks: silently wrong gradients.
            raise ValueError(f"{self.name}: cannot recompute a block with dropout: {random}")
        self.block = block
        # The static shape of the last traced call, for memory analysis.
        self.traced_input_shape = None

    def build(self, input_shape):
        if not self.block.built:
            self.block.build(input_shape)
        self.built = True

    def call(self, inputs, training=None):
        self.traced_input_shape = tuple(inputs.shape)
        if not training:
            return self.block(inputs, training=training)
        block = self.block

        @tf.custom_gradient
        def forward(x):
            with record.stop_recording():  # eager: keep the outer tape off the block
                y = block(x, training=True)

            def backward(dy, variables=None):
                x_again = _gated(x, dy)
                variables = list(variables or [])
                with tf.GradientTape() as tape:
                    tape.watch(x_again)
                    with keras.StatelessScope():
                        y_again = block(x_again, training=True)
                grads = tape.gradient(y_again, [x_again] + variables, output_gradients=dy)
                return grads[0], grads[1:]

            return y, backward

        return forward(inputs)

    def compute_output_shape(self, input_shape):
        return self.block.compute_output_shape(input_shape)

    def get_config(self):
        config = super().get_config()
        config["block"] = keras.saving.serialize_keras_object(self.block)
        return config

    @classmethod
    def from_config(cls, config):
        config["block"] = keras.saving.deserialize_keras_object(config["block"])
        return cls(**config)
