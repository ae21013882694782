"""tfseg models: DeepLabv3+ with an aligned Xception-65 backbone."""

from tfseg.models.deeplab import deeplab_v3_plus, normalize, part_of
from tfseg.models.policy import LayerPolicy
from tfseg.models.xception import XCEPTION65, BlockSpec, xception65, xception_features

__all__ = [
    "BlockSpec",
    "LayerPolicy",
    "XCEPTION65",
    "deeplab_v3_plus",
    "normalize",
    "part_of",
    "xception65",
    "xception_features",
]
