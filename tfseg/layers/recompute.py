"""Recompute a block in the backward pass instead of keeping its activations."""

import contextlib
import threading

import keras
import tensorflow as tf
from tensorflow.python.eager import record  # stop_recording has no public name

from tfseg import keras_graph
from tfseg.layers.chunked import check_channelwise, chunk_output, joined, ranges
from tfseg.layers.conv_kernels import TakesKernelForm, tail_backward
from tfseg.layers.dilated import accumulator
from tfseg.layers.gating import gated


@keras.saving.register_keras_serializable(package="tfseg")
class Recompute(TakesKernelForm, keras.layers.Layer):
    """Runs `block` (a single-output `keras.Model`) and keeps only its input, or its
    list of inputs, for the backward pass, where the block runs again under a tape
    (gradient checkpointing; Chen et al., https://arxiv.org/abs/1604.06174).

    The second run happens inside a `keras.StatelessScope`, so its variable
    assignments (the batch-norm moving statistics) are dropped: they update once
    per step, exactly as without recompute. Blocks must be deterministic in
    training (no dropout). The recompute is gated on the incoming gradient, by a
    control dependency and a data dependency (XLA ignores control dependencies),
    so neither TF nor XLA can schedule it into the forward pass.
    Shapes: those of `block`, or of `tail` applied to it.

    `tail`: an optional linear `keras.layers.Conv2D` or `DepthwiseConv2D` (dilation
    1, no activation) applied to the block's output, e.g. the pointwise conv of a
    separable conv whose cheap ReLU -> depthwise -> norm part is the block, or a
    depthwise conv whose input (a concatenation of resized maps) is the block. The block's output
    is then never kept: it is rebuilt for the tail's filter gradient, while the
    tail's gradients come straight from its backprop kernels, so the expensive
    tail itself never runs twice. Its variables keep their own paths.

    `tail_relu`: a ReLU comes between the block and the tail (a separable conv's
    norm -> ReLU -> pointwise conv), applied here rather than inside the block. Its
    output then lives only while the tail's filter gradient is made; the ReLU's
    gradient reads the block's output, so the two are never alive beside the
    incoming gradient of that size at once.

    `chunks` (with a `Conv2D` tail, over a block that works on each channel alone:
    `tfseg.layers.chunked`): the backward pass runs again and back for a k-th of the
    block's channels at a time, one chunk after the other, so the block's maps of its
    output's size live a k-th at a time. The forward pass is the same.

    `kernel_form` (`tfseg.layers.conv_kernels.TakesKernelForm`): the form of a
    `DepthwiseConv2D` tail's gradient kernels.
    """

    def __init__(self, block, tail=None, tail_relu=False, chunks=1, **kwargs):
        super().__init__(**kwargs)
        refuse_dropout(self.name, [block])
        if tail is not None and not (is_linear_conv(tail) or is_linear_depthwise(tail)):
            raise ValueError(f"{self.name}: the tail must be a linear, undilated, channels_last "
                             f"Conv2D or DepthwiseConv2D")
        if tail is not None and not tail.built:
            # Built here, outside this layer's name scope, so its variables keep
            # their own paths ("entry_block1_sepconv1_pointwise/kernel").
            tail.build(block.outputs[0].shape)
        if tail_relu and tail is None:
            raise ValueError(f"{self.name}: tail_relu needs a tail")
        self.block = block
        self.tail = tail
        self.tail_relu = bool(tail_relu)
        self.chunks = chunks

    @property
    def chunks(self):
        return self._chunks

    @chunks.setter
    def chunks(self, chunks):
        """Checked wherever it is set: a block that mixes channels would give wrong
        gradients in chunks, silently."""
        if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
            raise ValueError(f"{self.name}: chunks must be an integer >= 1, got {chunks!r}")
        if chunks > 1:
            if self.tail is None or not is_linear_conv(self.tail):
                raise ValueError(f"{self.name}: chunks needs a linear Conv2D tail")
            check_channelwise(self.block)
        self._chunks = chunks

    def _tail(self, y):
        return self.tail(tf.nn.relu(y) if self.tail_relu else y)

    def build(self, input_shape):
        if not self.block.built:
            self.block.build(input_shape)
        self.built = True

    def call(self, inputs, training=None):
        block, tail = self.block, self.tail
        if not training or getattr(_PLAIN, "on", False):
            y = block(inputs, training=training)
            return y if tail is None else self._tail(y)

        many = isinstance(inputs, (list, tuple))  # a block of several inputs

        @tf.custom_gradient
        def forward(*xs):
            with record.stop_recording():  # eager: keep the outer tape off the block
                y = block(list(xs) if many else xs[0], training=True)
                z = y if tail is None else self._tail(y)

            def backward(dz, variables=None):
                if self.chunks > 1:
                    with tf.name_scope(self.name):
                        dxs, grads = self._chunked_backward(xs, dz, list(variables or []))
                    return (dxs if many else dxs[0]), grads
                with tf.name_scope(self.name):
                    again = [gated(x, dz) for x in xs]
                    with tf.GradientTape() as tape:
                        tape.watch(again)
                        with keras.StatelessScope():
                            y_again = block(again if many else again[0], training=True)
                    dy, tail_grads = ((dz, {}) if tail is None
                                      else tail_backward(tail, y_again, dz, self.tail_relu,
                                                         kernel_form=self.kernel_form))
                    variables = list(variables or [])
                    inner = [v for v in variables if v.ref() not in tail_grads]
                    grads = tape.gradient(y_again, again + inner, output_gradients=dy)
                    by_ref = {**dict((v.ref(), g) for v, g in zip(inner, grads[len(xs):])),
                              **tail_grads}
                    # An input read for its shape only (a resize's target) has none.
                    dxs = [tf.zeros_like(x) if g is None else g
                           for x, g in zip(again, grads[:len(xs)])]
                    return (dxs if many else dxs[0]), [by_ref[v.ref()] for v in variables]

            return z, backward

        return forward(*inputs) if many else forward(inputs)

    def _chunked_backward(self, xs, dz, variables):
        """(input gradients, variable gradients) of the block and its tail, a chunk of
        the block's channels at a time, each chunk waiting for the one before."""
        pieces = {}  # ("input", i) or variable ref -> [(lo, hi, axis, gradient)]
        waits = [dz]
        for lo, hi in ranges(self.block.outputs[0].shape[-1], self.chunks):
            again = [gated(x, waits) for x in xs]
            taken = {}
            with tf.GradientTape() as tape:
                def inputs(i, a, b):
                    if (i, a, b) not in taken:
                        taken[(i, a, b)] = again[i][..., a:b]
                        tape.watch(taken[(i, a, b)])
                    return taken[(i, a, b)]
                y, weights = chunk_output(self.block, inputs, lo, hi, tape.watch)
            dy, tail_grads = tail_backward(self.tail, y, dz, self.tail_relu, channels=(lo, hi),
                                           kernel_form=self.kernel_form)
            keys = list(taken)
            grads = tape.gradient(y, [taken[k] for k in keys] + [w[4] for w in weights],
                                  output_gradients=dy)
            made = [(("input", i), a, b, -1) for i, a, b in keys]
            made += [(w[0].value.ref(), w[1], w[2], w[3]) for w in weights]
            kernel = self.tail.kernel.value.ref()
            made.append((kernel, lo, hi, 2))
            for (key, a, b, axis), g in zip(made, grads + [tail_grads[kernel]]):
                if g is not None:
                    pieces.setdefault(key, []).append((a, b, axis, g))
            waits = [g for g in grads if g is not None] + list(tail_grads.values())
        dxs = [joined(pieces.get(("input", i), []), x, dz) for i, x in enumerate(xs)]
        if self.tail.use_bias:
            pieces[self.tail.bias.value.ref()] = [(0, None, 0, tf.cast(tf.reduce_sum(
                tf.cast(dz, accumulator(dz.dtype)), [0, 1, 2]), self.tail.bias.dtype))]
        return dxs, [joined(pieces.get(v.ref(), []), v) for v in variables]

    def compute_output_shape(self, input_shape):
        shape = self.block.compute_output_shape(input_shape)
        return shape if self.tail is None else self.tail.compute_output_shape(shape)

    def get_config(self):
        config = super().get_config()
        config["block"] = keras.saving.serialize_keras_object(self.block)
        if self.tail is not None:
            config["tail"] = keras.saving.serialize_keras_object(self.tail)
        config["tail_relu"] = self.tail_relu
        config["chunks"] = self.chunks
        return config

    @classmethod
    def from_config(cls, config):
        config["block"] = keras.saving.deserialize_keras_object(config["block"])
        if config.get("tail") is not None:
            config["tail"] = keras.saving.deserialize_keras_object(config["tail"])
        return cls(**config)


def refuse_dropout(name, blocks):
    """Raises if a block that runs again has a dropout layer: the second run would draw
    other masks, and the gradients would be silently wrong."""
    random = [layer.name for block in blocks
              for layer in keras_graph.sublayers(block, include_self=True)
              if isinstance(layer, keras.layers.Dropout)]
    if random:
        raise ValueError(f"{name}: cannot run a block with dropout again: {random}")


def is_linear_conv(layer):
    return (
        type(layer) is keras.layers.Conv2D
        and layer.data_format == "channels_last"
        and layer.groups == 1
        and tuple(layer.dilation_rate) == (1, 1)
        and layer.activation in (None, keras.activations.linear)
    )


def is_linear_depthwise(layer):
    return (
        type(layer) is keras.layers.DepthwiseConv2D
        and layer.data_format == "channels_last"
        and tuple(layer.dilation_rate) == (1, 1)
        and layer.activation in (None, keras.activations.linear)
    )


_PLAIN = threading.local()


@contextlib.contextmanager
def plainly():
    """Inside, `Recompute` layers run their blocks as plain layers: a tape keeps what the
    blocks' layers keep, and nothing runs a third time. For a second run that keeps one
    piece of the model at a time by itself (`SerialBranches`' branches): its nested
    blocks' own recompute would run each of them once more for nothing."""
    was = getattr(_PLAIN, "on", False)
    _PLAIN.on = True
    try:
        yield
    finally:
        _PLAIN.on = was
