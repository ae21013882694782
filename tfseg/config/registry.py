"""The data sets and backbones tfseg offers, each listed once, without TensorFlow.

``--mode=validate`` checks ``--dataset`` and ``--backbone`` against these lists without
importing TensorFlow, so they cannot come from the modules that implement them. Instead
those modules are checked against them:

  * A data set reader (``tfseg/data/NAME.py``) registers itself under its name with
    ``@tfseg.data.register_reader("NAME")``; ``tests/data/test_registry.py`` fails
    unless the readers registered are exactly ``DATASETS``.
  * A keras.applications backbone is nothing but its ``Application`` entry here:
    ``tfseg.models.application_backbone`` builds whatever ``APPLICATIONS`` names.

Example::

    >>> "ade20k" in DATASETS, APPLICATIONS["resnet50"].constructor
    (True, 'ResNet50')
"""

import dataclasses

# --dataset: name -> the words its help adds after the name ("" for none). The help lists
# them in this order, the default (synthetic) first.
DATASETS = {
    "synthetic": "",
    "cityscapes": "",
    "voc": "",
    "camvid": "",
    "ade20k": "ADEChallengeData2016",
    "folder": "SPLIT/images + SPLIT/masks + classes.txt",
    "tfrecord": "",
}


@dataclasses.dataclass(frozen=True)
class Application:
    """One keras.applications backbone (``tfseg.models.applications``).

    Args:
      constructor: the ``keras.applications`` function, built with include_top=False.
      low_level: the layer whose output is the decoder's feature, at stride 4.
      out: the layer whose output is ASPP's input, at stride 32 before dilation.
      preprocessing: "caffe", "tf" or "raw": what its ImageNet weights expect
        (``tfseg.models.applications``' docstring).

    Example: ``Application("ResNet50", "conv2_block3_out", "conv5_block3_out", "caffe")``.
    """

    constructor: str
    low_level: str
    out: str
    preprocessing: str


# --backbone: the built-in aligned Xception-65 (tfseg.models.xception), or one of these.
BUILTIN_BACKBONE = "xception65"
# Low level: ResNet v1's last stride-4 block output; ResNet v2's blocks end before
# their norm and ReLU (pre-activation), so the next block's preactivation is the
# stride-4 feature (its conv2 stack downsamples in its last block); MobileNetV2 and
# EfficientNet: the expansion (ReLU6 / swish) of the first stride-8 block, which is
# still at stride 4, as the MobileNet segmentation heads take it. Out: the last feature.
_RESNET = dict(low_level="conv2_block3_out", out="conv5_block3_out", preprocessing="caffe")
_RESNET_V2 = dict(low_level="conv2_block3_preact_relu", out="post_relu", preprocessing="tf")
_EFFICIENTNET = dict(low_level="block3a_expand_activation", out="top_activation",
                     preprocessing="raw")
APPLICATIONS = {
    "resnet50": Application("ResNet50", **_RESNET),
    "resnet101": Application("ResNet101", **_RESNET),
    "resnet152": Application("ResNet152", **_RESNET),
    "resnet50v2": Application("ResNet50V2", **_RESNET_V2),
    "resnet101v2": Application("ResNet101V2", **_RESNET_V2),
    "mobilenetv2": Application("MobileNetV2", "block_3_expand_relu", "out_relu", "tf"),
    **{f"efficientnetb{i}": Application(f"EfficientNetB{i}", **_EFFICIENTNET) for i in range(8)},
}


def phrase(entries):
    """``{name: words}`` as a help phrase: "a, b (words) or c".

    Example: ``phrase({"voc": "", "ade20k": "ADE"})`` is ``"voc or ade20k (ADE)"``.
    """
    items = [f"{name} ({words})" if words else name for name, words in entries.items()]
    return " or ".join(filter(None, [", ".join(items[:-1]), items[-1]]))
