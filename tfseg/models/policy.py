"""The layer policy, and the small layer factories that every network part uses.

Every convolution, normalisation and activation in tfseg is made here, so that one
frozen `LayerPolicy` decides which norm, which activation and whether the
memory-saving twins are used, for the whole network at once.
"""

import dataclasses
import math

import keras

from tfseg.config import NORMS


@dataclasses.dataclass(frozen=True)
class LayerPolicy:
    """How the layers of a network are made.

    Args:
      norm: "batch" (`BatchNormalization`), "sync_batch" (the same with
        `synchronized=True`, statistics all-reduced across replicas) or "group"
        (`GroupNormalization`, independent of the batch size, so batch-1
        full-resolution training works).
      momentum: moving-average momentum of batch norm (Keras' convention).
      epsilon: the variance epsilon of every norm.
      groups: the number of groups of group norm. A layer whose width is not a
        multiple of it uses `gcd(width, groups)` groups (e.g. 16 for the
        decoder's 48-channel projection).
      kernel_initializer: initialiser of every convolution kernel.
    """

    norm: str = "batch"
    momentum: float = 0.99
    epsilon: float = 1e-3
    groups: int = 32
    kernel_initializer: str = "he_normal"

    def __post_init__(self):
        if self.norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {self.norm!r}")
        if self.groups < 1:
            raise ValueError(f"groups must be >= 1, got {self.groups}")


def fixed_padding(kernel_size, rate):
    """The ((top, bottom), (left, right)) padding that makes a strided conv 'same'
    with its taps aligned to the input grid, as in the reference DeepLab."""
    effective = kernel_size + (kernel_size - 1) * (rate - 1)
    total = effective - 1
    return ((total // 2, total - total // 2),) * 2


def norm(x, policy, name):
    channels = x.shape[-1]
    if policy.norm == "group":
        groups = math.gcd(channels, policy.groups)
        return keras.layers.GroupNormalization(groups=groups, epsilon=policy.epsilon, name=name)(x)
    return keras.layers.BatchNormalization(
        momentum=policy.momentum,
        epsilon=policy.epsilon,
        synchronized=policy.norm == "sync_batch",
        name=name,
    )(x)


def relu(x, name):
    return keras.layers.ReLU(name=name)(x)


def conv_norm_relu(x, filters, policy, name, kernel_size=1, strides=1):
    """Conv (no bias) -> norm -> ReLU; strided convs use explicit fixed padding."""
    padding = "same"
    if strides > 1:
        x = keras.layers.ZeroPadding2D(fixed_padding(kernel_size, 1), name=f"{name}_pad")(x)
        padding = "valid"
    x = keras.layers.Conv2D(
        filters,
        kernel_size,
        strides=strides,
        padding=padding,
        use_bias=False,
        kernel_initializer=policy.kernel_initializer,
        name=name,
    )(x)
    return relu(norm(x, policy, f"{name}_bn"), f"{name}_relu")


def separable_conv(x, filters, policy, name, strides=1, rate=1, relu_inside=False):
    """A DeepLab separable conv: depthwise 3x3 -> norm -> pointwise 1x1 -> norm.

    With `relu_inside=False` (entry, middle and exit block 1) a ReLU comes first:
    ReLU -> depthwise -> norm -> pointwise -> norm. With `relu_inside=True`
    (exit block 2, ASPP, decoder) it is depthwise -> norm -> ReLU -> pointwise ->
    norm -> ReLU.
    """
    padding = "same"
    if strides > 1:
        # relu(pad(x)) == pad(relu(x)), so padding first keeps ReLU next to the conv.
        x = keras.layers.ZeroPadding2D(fixed_padding(3, rate), name=f"{name}_pad")(x)
        padding = "valid"
    depthwise_args = dict(
        kernel_size=3,
        strides=strides,
        dilation_rate=rate,
        padding=padding,
        use_bias=False,
        depthwise_initializer=policy.kernel_initializer,
        name=f"{name}_depthwise",
    )
    if not relu_inside:
        x = relu(x, f"{name}_relu")
    x = keras.layers.DepthwiseConv2D(**depthwise_args)(x)
    x = norm(x, policy, f"{name}_depthwise_bn")
    if relu_inside:
        x = relu(x, f"{name}_depthwise_relu")
    x = keras.layers.Conv2D(
        filters,
        1,
        use_bias=False,
        kernel_initializer=policy.kernel_initializer,
        name=f"{name}_pointwise",
    )(x)
    x = norm(x, policy, f"{name}_pointwise_bn")
    if relu_inside:
        x = relu(x, f"{name}_pointwise_relu")
    return x


def scaled(filters, width_multiplier):
    """Channel count under a width multiplier, rounded to a multiple of 8."""
    if width_multiplier == 1.0:
        return filters
    return max(8, int(filters * width_multiplier + 4) // 8 * 8)
