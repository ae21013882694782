"""DeepLabv3+ in PyTorch as a PyTorch user writes it: timm's Xception-65 at output stride
16, ASPP with separable atrous branches, the 48-channel decoder. The peer that
benchmarks/peers/torch_deeplab.py times beside tfseg; it needs torch and timm, which
tfseg does not.

    import torch_model                               # beside this file
    model = torch_model.DeepLabV3Plus(num_classes=21, checkpoint_middle=False)
    logits = model(torch.randn(2, 3, 65, 97))        # [2, 21, 65, 97]
    torch_model.parts(model)                         # {"backbone": 37867312, "aspp": ..., ...}

Shapes: images [N, 3, H, W] (any H, W) -> logits [N, classes, H, W]. The layers follow
tfseg's (`tfseg.models.aspp`, `tfseg.models.decoder`): every separable conv is
depthwise 3x3 + BN + ReLU + pointwise 1x1 + BN + ReLU, every resize bilinear with
align_corners=False.
"""

import timm
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


def conv_bn_relu(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


def separable(cin, cout, dilation=1):
    """Depthwise 3x3 (dilated) + BN + ReLU, pointwise 1x1 + BN + ReLU: [N, cin, h, w] ->
    [N, cout, h, w]."""
    return nn.Sequential(
        nn.Conv2d(cin, cin, 3, padding=dilation, dilation=dilation, groups=cin, bias=False),
        nn.BatchNorm2d(cin), nn.ReLU(inplace=True),
        nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class PoolBranch(nn.Module):
    """ASPP's image pooling: global average, 1x1 conv + BN + ReLU, broadcast back.

    Training-mode BN over one value per channel (batch 1, as at 1024x2048) is an error
    in PyTorch; TensorFlow normalises it to exactly zero, leaving BN's bias. This does
    the same, so batch 1 trains here as it does in tfseg, with the same parameters.
    """

    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 1, bias=False)
        self.norm = nn.BatchNorm2d(cout)

    def forward(self, x):
        y = self.conv(F.adaptive_avg_pool2d(x, 1))
        if self.training and y.shape[0] == 1:
            y = y * 0 + self.norm.bias.to(y.dtype).view(1, -1, 1, 1)
        else:
            y = self.norm(y)
        return F.relu(y).expand(-1, -1, *x.shape[-2:])


class ASPP(nn.Module):
    """[N, cin, h, w] -> [N, filters, h, w]: pooling, 1x1 and separable atrous branches,
    concatenated and projected by 1x1 conv + BN + ReLU (+ dropout, off by default so
    timed steps are deterministic)."""

    def __init__(self, cin, filters=256, rates=(6, 12, 18), dropout=0.0):
        super().__init__()
        self.pool = PoolBranch(cin, filters)
        self.branches = nn.ModuleList(
            [conv_bn_relu(cin, filters)] + [separable(cin, filters, r) for r in rates])
        self.project = nn.Sequential(conv_bn_relu((2 + len(rates)) * filters, filters),
                                     nn.Dropout(dropout))

    def forward(self, x):
        return self.project(torch.cat([self.pool(x)] + [b(x) for b in self.branches], 1))


class Decoder(nn.Module):
    """high [N, C, h, w], low [N, C', 4h, 4w] -> logits [N, classes, 4h, 4w]."""

    def __init__(self, high_channels, low_channels, num_classes, filters=256, low_filters=48):
        super().__init__()
        self.low = conv_bn_relu(low_channels, low_filters)
        self.convs = nn.Sequential(separable(high_channels + low_filters, filters),
                                   separable(filters, filters))
        self.logits = nn.Conv2d(filters, num_classes, 1)

    def forward(self, high, low):
        low = self.low(low)
        high = F.interpolate(high, size=low.shape[-2:], mode="bilinear", align_corners=False)
        return self.logits(self.convs(torch.cat([high, low], 1)))


class Checkpointed(nn.Module):
    """Runs `block` under torch.utils.checkpoint: its activations are recomputed in the
    backward pass instead of kept (non-reentrant, the form PyTorch recommends)."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=False)


def middle_blocks(backbone):
    """The names of timm Xception-65's 16 middle-flow units in a features_only model:
    the XceptionModules with an identity shortcut (the entry and exit units project
    theirs, or have none); checkpointed ones too."""
    units = {name: getattr(m, "block", m) for name, m in backbone.named_children()}
    return [name for name, m in units.items()
            if type(m).__name__ == "XceptionModule" and m.shortcut is None and not m.no_skip]


class DeepLabV3Plus(nn.Module):
    """DeepLabv3+ on timm's xception65 (random weights; no network on the GPU machine).

    Args:
      num_classes: logits channels.
      checkpoint_middle: recompute the middle flow's 16 units in the backward pass.
    """

    def __init__(self, num_classes=21, checkpoint_middle=False):
        super().__init__()
        self.backbone = timm.create_model("xception65", features_only=True, output_stride=16,
                                          pretrained=False)
        info = self.backbone.feature_info
        channels, reductions = info.channels(), info.reduction()
        self.low_index = reductions.index(4)  # 256 channels
        self.high_index = len(reductions) - 1  # reduction 16, 2048 channels
        if checkpoint_middle:
            for name in middle_blocks(self.backbone):
                setattr(self.backbone, name, Checkpointed(getattr(self.backbone, name)))
        self.aspp = ASPP(channels[self.high_index])
        self.decoder = Decoder(256, channels[self.low_index], num_classes)

    def forward(self, images):
        features = self.backbone(images)
        logits = self.decoder(self.aspp(features[self.high_index]), features[self.low_index])
        return F.interpolate(logits, size=images.shape[-2:], mode="bilinear",
                             align_corners=False)


def parts(model):
    """Parameter counts: {"backbone", "middle_flow" (within it), "aspp", "decoder", "total"},
    and "norm_statistics": BN's running means and variances (buffers, not parameters;
    Keras' count_params counts them as weights)."""
    count = lambda module: sum(p.numel() for p in module.parameters())  # noqa: E731
    middle = sum(count(getattr(model.backbone, n)) for n in middle_blocks(model.backbone))
    return {"backbone": count(model.backbone), "middle_flow": middle,
            "aspp": count(model.aspp), "decoder": count(model.decoder), "total": count(model),
            "norm_statistics": sum(b.numel() for n, b in model.named_buffers()
                                   if n.endswith(("running_mean", "running_var")))}
