"""tfseg models: DeepLabv3+ with an aligned Xception-65 backbone or a keras.applications one,
and research/deeplab import."""

from tfseg.layers.pixels import normalize
from tfseg.models.applications import APPLICATIONS, Application, application_backbone
from tfseg.models.deeplab import DeepLabV3Plus, deeplab_v3_plus, part_of, segment_of
from tfseg.models.freeze import freeze_norms
from tfseg.models.policy import LayerPolicy
from tfseg.models.saving import deeplab_saving, memory_saving
from tfseg.models.research_deeplab import (REFERENCE_CONVENTIONS, ImportReport,
                                           from_research_deeplab, load_research_deeplab,
                                           research_deeplab_options)
from tfseg.models.xception import XCEPTION65, BlockSpec, xception65, xception_features

__all__ = [
    "APPLICATIONS",
    "Application",
    "BlockSpec",
    "DeepLabV3Plus",
    "ImportReport",
    "LayerPolicy",
    "REFERENCE_CONVENTIONS",
    "XCEPTION65",
    "application_backbone",
    "deeplab_saving",
    "deeplab_v3_plus",
    "freeze_norms",
    "from_research_deeplab",
    "load_research_deeplab",
    "memory_saving",
    "normalize",
    "part_of",
    "segment_of",
    "research_deeplab_options",
    "xception65",
    "xception_features",
]
