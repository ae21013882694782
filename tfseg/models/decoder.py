"""The DeepLabv3+ decoder: fuse the ASPP output with the stride-4 feature."""

import keras

from tfseg.layers import ResizeLike
from tfseg.models import policy as policy_lib


def decoder(high, low, policy, num_classes, filters=256, low_filters=48, name="decoder",
            align_corners=False, make_logits=None):
    """Projects `low` to `low_filters` channels, upsamples `high` to its size
    (`ResizeLike(align_corners)`), concatenates, applies two separable 3x3 convs
    and a 1x1 logits conv.

    Shapes: high [N, h, w, C], low [N, H, W, C'] -> logits [N, H, W, num_classes].
    `make_logits`: None, or a function of no arguments that makes the layer named
    "logits" to use instead of the 1x1 conv (a `tfseg.layers.ShardedLogits`, whose output
    is its input features). It is made where the conv would be, after the layers above:
    a layer's initialiser draws its seed when made, so for one seed both heads start
    from the same weights.
    """
    low = policy_lib.conv_norm_relu(low, low_filters, policy, f"{name}_projection")
    high = ResizeLike(align_corners, name=f"{name}_upsample")([high, low])
    x = keras.layers.Concatenate(name=f"{name}_concat")([high, low])
    for i in range(2):
        x = policy_lib.separable_conv(x, filters, policy, f"{name}_conv{i + 1}", relu_inside=True)
    # In the variable dtype (float32 under mixed precision): logits need the range,
    # and the conv is small.
    if make_logits is not None:
        return make_logits()(x)
    return keras.layers.Conv2D(
        num_classes,
        1,
        kernel_initializer=policy.kernel_initializer,
        dtype=keras.config.dtype_policy().variable_dtype,
        name="logits",
    )(x)
