"""A 1x1 conv over a concatenation of resized maps that resizes after it convolves.

SegFormer's decoder (and FPN-style heads) resizes each stage's map to the largest
size, concatenates them and fuses them with a 1x1 conv, which keeps the whole
concatenation for its kernel gradient: 128 MiB for SegFormer-B0 at 512x512, batch 2.
A 1x1 conv over a concatenation is the sum of 1x1 convs over its parts, each with
its slice of the kernel, and each part's conv commutes with its resize (bilinear or
nearest resizing is linear over pixels, the kernel linear over channels). The twin
convolves each part at its own size and resizes the results: it keeps the parts
before their resize, not the concatenation. Bias and activation come after the sum,
as in stock. The values are stock's up to the order of float rounding (TF's bilinear
resize computes in float32 whatever the dtype).
"""

import keras
from keras import ops

from tfseg.layers.upsampled_conv import INTERPOLATIONS


@keras.saving.register_keras_serializable(package="tfseg")
class ResizedConcatConv2D(keras.layers.Conv2D):
    """Drop-in twin of [`Resizing` ->] `Concatenate` -> 1x1 `keras.layers.Conv2D`.

    Same arguments and variables as the Conv2D (1x1, stride 1, one group, channels
    last), plus `input_sizes`: for each part of the concatenation, in order, None
    (taken as it is) or [height, width, interpolation] ("bilinear" or "nearest", as
    `keras.layers.Resizing` without cropping, padding or antialiasing). Called on the
    list of parts before their resize. Shapes: [[N, h_i, w_i, C_i]] -> [N, H, W, filters].

    Example:

    >>> conv = ResizedConcatConv2D(3, 1, input_sizes=[None, [8, 8, "bilinear"]])
    >>> conv([tf.ones([2, 8, 8, 4]), tf.ones([2, 2, 2, 6])]).shape
    TensorShape([2, 8, 8, 3])
    """

    def __init__(self, *args, input_sizes=(), **kwargs):
        super().__init__(*args, **kwargs)
        if (tuple(self.kernel_size) != (1, 1) or tuple(self.strides) != (1, 1)
                or self.groups != 1 or self.data_format != "channels_last"):
            raise ValueError(f"{self.name}: ResizedConcatConv2D is a 1x1, stride 1, "
                             f"one-group, channels-last conv")
        for size in input_sizes:
            if size is not None and size[2] not in INTERPOLATIONS:
                raise ValueError(f"{self.name}: interpolation {size[2]!r} is not one of "
                                 f"{INTERPOLATIONS}")
        self.input_sizes = [None if s is None else [int(s[0]), int(s[1]), s[2]]
                            for s in input_sizes]
        self.input_spec = None  # a list of maps, not the one map the stock conv checks

    def build(self, input_shape):
        if len(input_shape) != len(self.input_sizes):
            raise ValueError(f"{self.name}: {len(input_shape)} inputs for "
                             f"{len(self.input_sizes)} input_sizes")
        self._parts = [int(shape[-1]) for shape in input_shape]
        super().build((None, None, None, sum(self._parts)))
        self.input_spec = None

    def call(self, inputs):
        out, start = None, 0
        for x, channels, size in zip(inputs, self._parts, self.input_sizes):
            y = self.convolution_op(x, self.kernel[:, :, start:start + channels, :])
            start += channels
            if size is not None:
                y = ops.image.resize(y, size[:2], interpolation=size[2],
                                     data_format="channels_last")
            out = y if out is None else ops.add(out, y)
        if self.use_bias:
            out = ops.add(out, self.bias)
        return self.activation(out) if self.activation is not None else out

    def compute_output_shape(self, input_shape):
        # The stock build asks with the one shape of the concatenation.
        first = input_shape[0] if isinstance(input_shape[0], (list, tuple)) else input_shape
        height, width = next((s[:2] for s in self.input_sizes if s is not None), first[1:3])
        return (first[0], height, width, self.filters)

    def get_config(self):
        return {**super().get_config(), "input_sizes": self.input_sizes}
