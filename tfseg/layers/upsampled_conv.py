"""A 1x1 conv that takes in the upsampling before it: it convolves first, then upsamples.

keras-hub's DeepLabV3 upsamples its 256-channel head to the image size, and the task's
1x1 classifier conv keeps that map for its kernel gradient: 512 MiB at 512x512, batch 2,
and as much again for the map's gradient in the backward pass. Upsampling (bilinear or
nearest) is linear over pixels and a 1x1 conv's kernel linear over channels, so they
commute; the bias and activation come after both, as in stock. The twin convolves at
the small size and upsamples the class scores: it keeps the small map, and the resize's
gradient brings the output gradient down to the small size before the kernel and input
gradients are made. The values are the stock composition's up to the order of float
rounding. DeepLabv3+ (Chen et al., ECCV 2018, https://arxiv.org/abs/1802.02611) computes
its logits at 1/4 size and upsamples them for the same reason, as tfseg's model does.
"""

import keras
from keras import ops

INTERPOLATIONS = ("bilinear", "nearest")


def upsample(x, size, interpolation):
    """`x` [N, h, w, C] upsampled by `size` (rows, cols) as `keras.layers.UpSampling2D`."""
    if interpolation == "nearest":
        return ops.repeat(ops.repeat(x, size[0], axis=1), size[1], axis=2)
    shape = ops.shape(x)
    return ops.image.resize(x, (shape[1] * size[0], shape[2] * size[1]),
                            interpolation=interpolation, data_format="channels_last")


@keras.saving.register_keras_serializable(package="tfseg")
class UpsampledConv2D(keras.layers.Conv2D):
    """Drop-in twin of `UpSampling2D(size, interpolation=...)` -> 1x1 `keras.layers.Conv2D`.

    Same arguments and variables as the Conv2D (1x1, stride 1, one group, channels
    last), plus `input_upsampling` (the UpSampling2D's size, (rows, cols)) and
    `input_interpolation` ("bilinear" or "nearest"). Keeps the small input, not the
    upsampled one. Shapes: [N, h, w, C] -> [N, h * rows, w * cols, filters].

    Example:

    >>> conv = UpsampledConv2D(3, 1, input_upsampling=(4, 4))
    >>> conv(tf.ones([2, 5, 7, 16])).shape
    TensorShape([2, 20, 28, 3])
    """

    def __init__(self, *args, input_upsampling=(2, 2), input_interpolation="bilinear",
                 **kwargs):
        super().__init__(*args, **kwargs)
        if (tuple(self.kernel_size) != (1, 1) or tuple(self.strides) != (1, 1)
                or self.groups != 1 or self.data_format != "channels_last"):
            raise ValueError(f"{self.name}: UpsampledConv2D is a 1x1, stride 1, one-group, "
                             f"channels-last conv")
        if input_interpolation not in INTERPOLATIONS:
            raise ValueError(f"{self.name}: input_interpolation {input_interpolation!r} is not "
                             f"one of {INTERPOLATIONS}")
        self.input_upsampling = tuple(int(s) for s in input_upsampling)
        self.input_interpolation = input_interpolation

    def call(self, inputs):
        outputs = upsample(self.convolution_op(inputs, self.kernel), self.input_upsampling,
                           self.input_interpolation)
        if self.use_bias:
            outputs = ops.add(outputs, self.bias)
        return self.activation(outputs) if self.activation is not None else outputs

    def compute_output_shape(self, input_shape):
        n, h, w, _ = input_shape
        rows, cols = self.input_upsampling
        return (n, None if h is None else h * rows, None if w is None else w * cols,
                self.filters)

    def get_config(self):
        return {**super().get_config(), "input_upsampling": self.input_upsampling,
                "input_interpolation": self.input_interpolation}
