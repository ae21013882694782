"""A separable conv's backward pass a few channels at a time (`Recompute(chunks=k)`).

Between its pointwise conv and its input, a separable conv (an activation, a
depthwise conv, a batch norm, and in DeepLabv3+'s decoder the resize and the
concatenation before them) works on each channel alone. So its backward pass can
run again, and back, for channels [lo, hi) of the block at a time: the pointwise
conv's kernel rows of those channels give their gradient, and the rest of the chain
needs only those channels of its inputs. The maps of the chain then live a k-th at a
time: where a separable conv's backward pass runs while the whole network's kept
activations are alive (the decoder's, the first to run back), its three maps of the
block's size (the incoming gradient, the norm's rebuilt input, the norm's input
gradient) were the step's peak.

`chunk_output(block, inputs, lo, hi, watch)` evaluates channels [lo, hi) of a block's
output from slices of its inputs with slices of its weights (plain TensorFlow ops,
recorded by the caller's tape), for the layers of `CHANNELWISE`; `check_channelwise`
says which a block holds that it cannot.
"""

import keras
import tensorflow as tf

from tfseg import keras_graph
from tfseg.layers import elementwise
from tfseg.layers.gating import gated, stat_dtype
from tfseg.layers.resize import ResizeLike

__all__ = ["check_channelwise", "chunk_output", "joined", "ranges"]


def ranges(channels, chunks):
    """[(lo, hi)] splitting `channels` into `chunks` near-equal parts (none empty)."""
    chunks = max(1, min(int(chunks), int(channels)))
    bounds = [round(i * channels / chunks) for i in range(chunks + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def _node(tensor):
    return keras_graph.producer(tensor), keras_graph.producing_node(tensor)


def _norm(layer):
    return (isinstance(layer, keras.layers.BatchNormalization) and not layer.renorm
            and not layer.synchronized and layer.axis in (-1, 3))


def _depthwise(layer):
    return (isinstance(layer, keras.layers.DepthwiseConv2D) and layer.depth_multiplier == 1
            and layer.data_format == "channels_last"
            and layer.activation in (None, keras.activations.linear))


def _passes(layer):
    """Layers called as they are on a slice: channel-blind ones."""
    return (isinstance(layer, (keras.layers.ZeroPadding2D, ResizeLike, keras.layers.ReLU))
            or elementwise.is_elementwise(layer))


def _recompute(layer):
    """Whether `layer` is a `Recompute` (its block and tail; by what it holds, since
    recompute.py imports this module)."""
    return hasattr(layer, "block") and hasattr(layer, "tail")


def check_channelwise(block):
    """Raises a ValueError naming the first layer of `block` (a functional model)
    whose output channel c does not come from its inputs' channel c alone."""
    reads = {}  # id(tensor) -> how many of its nodes read it as data (a resize's reference: not)
    for node in keras_graph.nodes_in_order(block, inputs=True):
        layer = node.operation
        data = node.input_tensors[:1] if isinstance(layer, ResizeLike) else node.input_tensors
        for tensor in data:
            reads[id(tensor)] = reads.get(id(tensor), 0) + 1
    if any(n > 1 for n in reads.values()):
        raise ValueError(f"{block.name}: a map is read by two of its layers, whose chunks "
                         f"would both give gradients to its channels")
    for layer in block.layers:
        if isinstance(layer, keras.layers.InputLayer) or _passes(layer) or _norm(layer):
            continue
        if isinstance(layer, keras.layers.Concatenate) and layer.axis in (-1, 3):
            continue
        if _depthwise(layer) and getattr(layer, "input_parts", None) is None:
            continue
        if _recompute(layer) and layer.tail is not None and _depthwise(layer.tail):
            check_channelwise(layer.block)
            continue
        raise ValueError(f"{block.name}: {layer.name} ({type(layer).__name__}) mixes channels "
                         f"or is not one a chunked backward pass knows")


class _Slices:
    """Slices of weights, watched once each: (variable ref, lo, hi) -> tensor."""

    def __init__(self, watch):
        self.watch, self.made = watch, {}

    def __call__(self, variable, lo, hi, dtype, axis=-1):
        key = (id(variable), lo, hi)
        if key not in self.made:
            index = [slice(None)] * len(variable.shape)
            index[axis] = slice(lo, hi)
            value = variable.value[tuple(index)]
            if variable.trainable:
                self.watch(value)
            self.made[key] = (variable, lo, hi, axis, value)
        return tf.cast(self.made[key][4], dtype)


def chunk_output(block, inputs, lo, hi, watch, slices=None):
    """Channels [lo, hi) of `block`'s output, from `inputs(i, lo, hi)` (channels [lo, hi)
    of its i-th input). Returns (output, weight slices: [(variable, lo, hi, axis,
    tensor)] of its trainable weights, each watched by `watch`)."""
    slices = slices or _Slices(watch)
    memo = {}
    positions = {id(t): i for i, t in enumerate(block.inputs)}

    def value(tensor, lo, hi):
        key = (id(tensor), lo, hi)
        if key not in memo:
            memo[key] = _evaluate(tensor, lo, hi)
        return memo[key]

    def _evaluate(tensor, lo, hi):
        if id(tensor) in positions:
            return inputs(positions[id(tensor)], lo, hi)
        layer, node = _node(tensor)
        parts = node.input_tensors
        if isinstance(layer, keras.layers.Concatenate):
            pieces, start = [], 0
            for part in parts:
                end = start + part.shape[-1]
                if max(lo, start) < min(hi, end):
                    pieces.append(value(part, max(lo, start) - start, min(hi, end) - start))
                start = end
            return pieces[0] if len(pieces) == 1 else tf.concat(pieces, -1)
        if isinstance(layer, ResizeLike):  # the reference is read for its size only
            return layer([value(parts[0], lo, hi), value(parts[1], 0, 1)])
        x = value(parts[0], lo, hi)
        if _norm(layer):
            return _normalized(layer, x, lo, hi, slices)
        if isinstance(layer, keras.layers.DepthwiseConv2D):
            return _depthwise_slice(layer, x, lo, hi, slices)
        if _recompute(layer):  # a Recompute inside
            inner, _ = chunk_output(layer.block, lambda i, a, b: value(parts[i], a, b), lo, hi,
                                    watch, slices)
            if layer.tail_relu:
                inner = tf.nn.relu(inner)
            return _depthwise_slice(layer.tail, inner, lo, hi, slices)
        return layer(x)

    out = value(block.outputs[0], lo, hi)
    return out, [made for made in slices.made.values() if made[0].trainable]


def _depthwise_slice(layer, x, lo, hi, slices):
    fn = getattr(layer, "_input_fn", None)
    if fn is not None:  # an activation taken in (ReluDepthwiseConv2D)
        x = tf.nn.relu(x) if fn == "relu" else fn(x)
    padding = getattr(layer, "input_padding", None)
    if padding is not None:
        x = tf.pad(x, [[0, 0], list(padding[0]), list(padding[1]), [0, 0]])
    kernel = slices(layer.kernel, lo, hi, x.dtype, axis=2)
    y = keras.ops.depthwise_conv(x, kernel, strides=layer.strides, padding=layer.padding,
                                 dilation_rate=layer.dilation_rate, data_format="channels_last")
    if layer.use_bias:
        y = y + slices(layer.bias, lo, hi, y.dtype)
    return y


def _normalized(layer, x, lo, hi, slices):
    """The batch norm of channels [lo, hi): batch statistics in training, as the stock
    layer computes them (float32 for half types), moving ones when frozen."""
    dtype = stat_dtype(x.dtype)
    wide = tf.cast(x, dtype)
    if layer.trainable:
        mean, variance = tf.nn.moments(wide, axes=[0, 1, 2])
    else:
        mean = slices(layer.moving_mean, lo, hi, dtype)
        variance = slices(layer.moving_variance, lo, hi, dtype)
    gamma = slices(layer.gamma, lo, hi, dtype) if layer.scale else None
    beta = slices(layer.beta, lo, hi, dtype) if layer.center else None
    y = tf.nn.batch_normalization(wide, mean, variance, beta, gamma, layer.epsilon)
    return tf.cast(y, x.dtype)


def joined(pieces, like, gradient=None):
    """The gradient of `like` (a tensor or variable) from its slices' gradients
    [(lo, hi, axis, gradient)]: joined along their axis, zeros where none is; None
    where there is no piece and `like` is a variable (no gradient, as a tape says).
    `gradient`: what zeros for a tensor wait for (the incoming gradient: made without
    it, they are made as the step starts and held to the backward pass)."""
    if not pieces:
        if isinstance(like, tf.Variable):
            return None
        return tf.zeros(tf.shape(gated(like, gradient)), like.dtype)
    if len(pieces) == 1 and pieces[0][1] is None:  # whole
        return pieces[0][3]
    axis = pieces[0][2] % len(like.shape)
    parts, at = [], 0

    def zeros(channels, near):  # `near`'s shape with `channels` on the axis (batch unknown)
        shape = tf.tensor_scatter_nd_update(tf.shape(near), [[axis]], [channels])
        return tf.zeros(shape, near.dtype)

    for lo, hi, _, piece in sorted(pieces, key=lambda p: p[0]):
        if lo < at:
            raise AssertionError("two chunks gave gradients to the same channels")
        if lo > at:
            parts.append(zeros(lo - at, piece))
        parts.append(piece)
        at = hi
    if at < like.shape[axis]:
        parts.append(zeros(like.shape[axis] - at, parts[-1]))
    return tf.concat(parts, axis)
