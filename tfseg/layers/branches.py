"""Parallel branches on one input whose backward passes run one at a time."""

import keras
import tensorflow as tf
from tensorflow.python.eager import record  # stop_recording has no public name

from tfseg.layers.gating import gated
from tfseg.layers.recompute import plainly, refuse_dropout


@keras.saving.register_keras_serializable(package="tfseg")
class SerialBranches(keras.layers.Layer):
    """Runs `branches` (single-input, single-output `keras.Model`s) on one input and
    concatenates their outputs along `axis`, keeping only the input for the backward
    pass. There the branches run again, one after another: branch k+1 starts only
    once branch k's input gradient has been added to the sum, so one branch's
    working set is alive at a time, and one input gradient instead of one per branch.
    The forward pass runs them one after another too (each waits for the previous
    one's output): it ends where everything the model keeps is alive.

    Why: a stock concatenation of parallel branches (ASPP: Chen et al.,
    https://arxiv.org/abs/1706.05587) splits the output gradient and TF's executor
    then runs every branch's backward pass at once. In DeepLabv3+'s ASPP, at 513x513
    with batch 2, two separable branches' rebuilt space-to-batch copies (56 MiB each)
    and four 17 MiB input gradients waiting for their sum were alive together at the
    memory-saving model's peak.

    Each branch's second run is inside a `keras.StatelessScope` (its batch-norm
    moving statistics update once per step) and is gated on the incoming gradient
    and on the previous branch's, by control and data dependencies (XLA drops
    control dependencies). Branches must be deterministic in training (no dropout).
    The price is one more forward run of every branch; the `Recompute` blocks inside
    run plainly there (`tfseg.layers.recompute.plainly`), not a third time in their own
    backward passes: that third run of ASPP's dilated separable convs was a memory-saving
    DeepLab's largest extra step time (docs/benchmarks.md, "Smaller measurements").

    Shapes: [N, ..., C] -> [N, ..., sum of the branches' channels] along `axis`.
    """

    def __init__(self, branches, axis=-1, **kwargs):
        super().__init__(**kwargs)
        refuse_dropout(self.name, branches)
        if len(branches) < 2:
            raise ValueError(f"{self.name}: needs two branches or more, got {len(branches)}")
        self.branches = list(branches)
        self.axis = axis

    def build(self, input_shape):
        for branch in self.branches:
            if not branch.built:
                branch.build(input_shape)
        self.built = True

    def call(self, inputs, training=None):
        branches, axis = self.branches, self.axis
        if not training:
            return tf.concat([b(inputs, training=training) for b in branches], axis)

        @tf.custom_gradient
        def forward(x):
            with record.stop_recording():  # eager: keep the outer tape off the branches
                ys = []
                for b in branches:  # one after another: one working set at a time
                    # A control dependency: an order for TF's executor (XLA schedules
                    # by itself), not a data gate's full-size add there.
                    with tf.control_dependencies(ys[-1:]):
                        ys.append(b(tf.identity(x), training=True))
            sizes = [y.shape[axis] if y.shape[axis] is not None else tf.shape(y)[axis] for y in ys]

            def backward(dz, variables=None):
                with tf.name_scope(self.name):
                    variables = list(variables or [])
                    grads = [None] * len(variables)
                    dx, gate = None, dz
                    for branch, dy in zip(branches, tf.split(dz, sizes, axis)):
                        x_again = gated(x, gate)
                        with tf.GradientTape() as tape:
                            tape.watch(x_again)
                            # A branch's Recompute blocks run plainly: this run
                            # already keeps one branch at a time.
                            with keras.StatelessScope(), plainly():
                                y_again = branch(x_again, training=True)
                        found = tape.gradient(y_again, [x_again] + variables, output_gradients=dy)
                        if found[0] is not None:  # a branch may only read x's shape
                            dx = found[0] if dx is None else dx + found[0]
                            gate = dx
                        grads = [g if f is None else f if g is None else g + f
                                 for g, f in zip(grads, found[1:])]
                    if dx is None:
                        dx = tf.zeros_like(x)
                    return dx, grads

            return tf.concat(ys, axis), backward

        return forward(inputs)

    def compute_output_shape(self, input_shape):
        shapes = [b.compute_output_shape(input_shape) for b in self.branches]
        axis = self.axis % len(shapes[0])
        sizes = [s[axis] for s in shapes]
        total = None if None in sizes else sum(sizes)
        return (*shapes[0][:axis], total, *shapes[0][axis + 1:])

    def get_config(self):
        config = super().get_config()
        config["branches"] = [keras.saving.serialize_keras_object(b) for b in self.branches]
        config["axis"] = self.axis
        return config

    @classmethod
    def from_config(cls, config):
        config["branches"] = [keras.saving.deserialize_keras_object(b) for b in config["branches"]]
        return cls(**config)
