"""tfseg: train DeepLabv3+ / Xception-65 at full resolution on one GPU."""

__version__ = "0.1.0"
