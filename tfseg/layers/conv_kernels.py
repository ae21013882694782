"""The conv kernels the twins call by hand: the depthwise conv's, TensorFlow's own or a
grouped Conv2D's, and a block's tail conv's backward pass from its backprop kernels.

TensorFlow runs `DepthwiseConv2dNative` and its two gradients in kernels of its own; on
a GPU they call cuDNN only for half precision in NCHW. The same conv is a `Conv2D` with
one group per channel (the kernel [kh, kw, C, 1] read as [kh, kw, 1, C]: channel c is
group c's filter), which a GPU runs in cuDNN's grouped convolution in every dtype,
dilated by the conv itself rather than by a space-to-batch copy. On a CPU it does not
run: TensorFlow's own kernels have no grouped-conv gradient, and oneDNN's take no
explicit padding, and its graph pass left some of the twins' grouped gradients (inside
`Recompute` blocks' backward passes) to TensorFlow's kernels (each seen here).

The form (`FORMS`, `--depthwise_kernel`) is each layer's own `kernel_form` setting
(`TakesKernelForm`), saved in its config: "native" TensorFlow's kernels; "grouped" the
grouped conv on a GPU, wherever the depth multiplier is 1; "auto" the measured choice:
native, the only form measured in the step so far. `benchmarks/dilated.py` times both
alone at the network's shapes (the GPU speed set's `dilated` stage), which is what would
make "auto" grouped on a GPU: reasoned, not measured, until then.

The twins that take it: the ReLU-depthwise twin (`tfseg.layers.fused_conv`), including
its dilated form where TF's would be kept, and a `Recompute` block's tail
(`tail_backward`, `tfseg.layers.recompute`). Stock Keras layers, and layers a block runs
again as they are, keep TensorFlow's kernels.

Example:

    >>> import tensorflow as tf
    >>> from tfseg.layers import conv_kernels
    >>> x, k = tf.ones([1, 5, 7, 4]), tf.ones([3, 3, 4, 1])
    >>> y = conv_kernels.forward(x, k, [1, 1, 1, 1], "SAME", grouped=False)
    >>> tuple(y.shape)
    (1, 5, 7, 4)
"""

import keras
import tensorflow as tf

from tfseg.layers.dilated import accumulator

FORMS = ("auto", "native", "grouped")


def check_form(form):
    """A ValueError naming `FORMS` unless `form` is one of them."""
    if form not in FORMS:
        raise ValueError(f"depthwise kernel form must be one of {FORMS}, got {form!r}")


class TakesKernelForm:
    """The `kernel_form` argument (one of `FORMS`, default "auto") of a layer whose
    depthwise convs run here: the depthwise twins and `Recompute`'s tail. Each layer
    keeps its own, in its config too, so a saved model reloads with it; a config without
    it (saved before it was a setting) reads "auto"."""

    def __init__(self, *args, kernel_form="auto", **kwargs):
        check_form(kernel_form)  # before the layer's own checks
        super().__init__(*args, **kwargs)
        self.kernel_form = kernel_form

    def get_config(self):
        return {**super().get_config(), "kernel_form": self.kernel_form}


def has_grouped_gradient():
    """Whether the grouped form runs here: on a GPU (cuDNN); not on a CPU (above)."""
    return bool(tf.config.list_logical_devices("GPU"))


def grouped(kernel, form):
    """Whether a depthwise conv with this kernel ([kh, kw, C, multiplier]) runs as a
    grouped Conv2D: `form` (its layer's `kernel_form`) is "grouped", the multiplier 1,
    and a GPU runs the step."""
    return form == "grouped" and kernel.shape[-1] == 1 and has_grouped_gradient()


def _rates(dilations):
    return [1, *dilations, 1]


def _as_groups(kernel):
    return tf.reshape(kernel, [kernel.shape[0], kernel.shape[1], 1, -1])


def forward(t, kernel, strides, padding, explicit=(), dilations=(1, 1), grouped=True):
    """The depthwise conv of NHWC `t`; `strides` [1, s, s, 1], `padding` "SAME", "VALID"
    or "EXPLICIT" with `explicit` [0, 0, top, bottom, left, right, 0, 0]."""
    if grouped:
        return tf.raw_ops.Conv2D(input=t, filter=_as_groups(kernel), strides=strides,
                                 padding=padding, explicit_paddings=list(explicit),
                                 dilations=_rates(dilations))
    if tuple(dilations) != (1, 1):  # as stock Keras runs it: space-to-batch
        return tf.nn.depthwise_conv2d(t, kernel, strides, padding, dilations=dilations)
    return tf.raw_ops.DepthwiseConv2dNative(input=t, filter=kernel, strides=strides,
                                            padding=padding, explicit_paddings=list(explicit))


def input_grad(shape, kernel, dy, strides, padding, explicit=(), dilations=(1, 1),
               grouped=True):
    """The gradient of `forward`'s input of `shape` (undilated, unless grouped)."""
    if grouped:
        static = tf.get_static_value(shape)  # constant where known: as for `filter_grad`
        return tf.raw_ops.Conv2DBackpropInput(
            input_sizes=shape if static is None else [int(d) for d in static],
            filter=_as_groups(kernel), out_backprop=dy, strides=strides, padding=padding,
            explicit_paddings=list(explicit), dilations=_rates(dilations))
    return tf.raw_ops.DepthwiseConv2dNativeBackpropInput(
        input_sizes=shape, filter=kernel, out_backprop=dy, strides=strides, padding=padding,
        explicit_paddings=list(explicit))


def filter_grad(t, shape, dy, strides, padding, explicit=(), dilations=(1, 1), grouped=True):
    """The gradient of `forward`'s kernel of `shape` ([kh, kw, C, 1] when grouped)."""
    if grouped:
        # A constant size where the kernel's shape is static: oneDNN's graph pass rewrites
        # the op to its grouped kernel only then (the CPU's check of this maths, in
        # tests/layers/test_conv_kernels.py; TF's own CPU kernel refuses it).
        static = tf.get_static_value(shape)
        groups = ([int(static[0]), int(static[1]), 1, int(static[2] * static[3])]
                  if static is not None else tf.stack([shape[0], shape[1], 1, shape[2] * shape[3]]))
        grad = tf.raw_ops.Conv2DBackpropFilter(
            input=t, filter_sizes=groups, out_backprop=dy, strides=strides, padding=padding,
            explicit_paddings=list(explicit), dilations=_rates(dilations))
        return tf.reshape(grad, shape)
    return tf.raw_ops.DepthwiseConv2dNativeBackpropFilter(
        input=t, filter_sizes=shape, out_backprop=dy, strides=strides, padding=padding,
        explicit_paddings=list(explicit))


def conv_filter_grad(t, shape, dz, **form):
    """A Conv2D's kernel gradient (`Conv2DBackpropFilter`), in `filter_grad`'s order."""
    return tf.raw_ops.Conv2DBackpropFilter(input=t, filter_sizes=shape, out_backprop=dz, **form)


def conv_input_grad(shape, kernel, dz, **form):
    """A Conv2D's input gradient (`Conv2DBackpropInput`), in `input_grad`'s order."""
    return tf.raw_ops.Conv2DBackpropInput(input_sizes=shape, filter=kernel, out_backprop=dz,
                                          **form)


def tail_backward(conv, y, dz, relu=False, channels=None, kernel_form="auto"):
    """(dL/dy, {variable ref: gradient}) of the linear conv z = conv(y), or of z =
    conv(relu(y)) with `relu`, from its backprop kernels: the conv is not run again.
    `channels` (lo, hi): y is those input channels of the conv only; the kernel's
    gradient is then that of those rows, and the bias (the caller's) has none.
    `kernel_form`: the form (`FORMS`) of a depthwise conv's gradients."""
    strides, padding = [1, *conv.strides, 1], conv.padding.upper()
    kernel = tf.cast(conv.kernel.value, dz.dtype)
    if channels is not None:
        kernel = kernel[:, :, channels[0]:channels[1], :]
    form = dict(strides=strides, padding=padding)
    backprop_filter, backprop_input = conv_filter_grad, conv_input_grad
    if type(conv) is keras.layers.DepthwiseConv2D:
        form["grouped"] = grouped(kernel, kernel_form)
        backprop_filter, backprop_input = filter_grad, input_grad
    dkernel = backprop_filter(tf.nn.relu(y) if relu else y, tf.shape(kernel), dz, **form)
    # dL/dy after the filter gradient, so after y is rebuilt: made first (it needs
    # only dz), it sat beside the block's second run, one more tensor of y's size.
    with tf.control_dependencies([dkernel]):
        dy = backprop_input(tf.shape(y), kernel, dz, **form)
        if relu:  # from y, not relu(y): that is gone once dkernel is made
            dy = tf.raw_ops.ReluGrad(gradients=dy, features=y)
    grads = {conv.kernel.value.ref(): tf.cast(dkernel, conv.kernel.dtype)}
    if conv.use_bias and channels is None:
        # Summed in float32 for half types (TF's CPU kernels sum float16 in float16).
        grads[conv.bias.value.ref()] = tf.cast(
            tf.reduce_sum(tf.cast(dz, accumulator(dz.dtype)), [0, 1, 2]), conv.bias.dtype)
    # The block's backward pass waits for the tail's gradients: dz and y are then
    # free before it starts, instead of alive beside its working set (TF's
    # executor ran the filter gradient last). XLA schedules by itself.
    with tf.control_dependencies(list(grads.values())):
        dy = tf.identity(dy)
    return dy, grads
