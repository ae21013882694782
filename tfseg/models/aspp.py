"""Atrous Spatial Pyramid Pooling with separable atrous branches.

Chen et al., "Rethinking Atrous Convolution for Semantic Image Segmentation",
https://arxiv.org/abs/1706.05587, with the separable branches of DeepLabv3+.
"""

import keras

from tfseg.layers import ResizeLike
from tfseg.models import policy as policy_lib

ATROUS_RATES = {8: (12, 24, 36), 16: (6, 12, 18), 32: ()}


def aspp(x, policy, rates, filters=256, dropout=0.1, name="aspp", align_corners=False):
    """Image pooling, a 1x1 branch and one separable 3x3 branch per atrous rate,
    concatenated and projected by 1x1 conv + norm + ReLU, then dropout.
    `align_corners`: the convention of the pooled branch's upsample (`ResizeLike`);
    from a 1x1 map both give the same broadcast.

    Shapes: [N, h, w, C] -> [N, h, w, filters]. With no rates (output stride 32)
    only the pooling and 1x1 branches remain, as in the reference.
    """
    pool = keras.layers.GlobalAveragePooling2D(keepdims=True, name=f"{name}_pool")(x)
    pool = policy_lib.conv_norm_relu(pool, filters, policy, f"{name}_pool_conv")
    branches = [ResizeLike(align_corners, name=f"{name}_pool_resize")([pool, x])]
    branches.append(policy_lib.conv_norm_relu(x, filters, policy, f"{name}_conv1x1"))
    for i, rate in enumerate(rates):
        branches.append(
            policy_lib.separable_conv(
                x, filters, policy, f"{name}_sepconv{i + 1}", rate=rate, relu_inside=True
            )
        )
    x = keras.layers.Concatenate(name=f"{name}_concat")(branches)
    x = policy_lib.conv_norm_relu(x, filters, policy, f"{name}_projection")
    return keras.layers.Dropout(dropout, name=f"{name}_dropout")(x)
