"""XLA for the training step: a model run as compiled blocks (`Blocks`), which blocks a
DeepLabv3+ has, and the compilation cache a second process reads."""

from tfseg.xla.blocks import Blocks
from tfseg.xla.shared import tf_variables

__all__ = ["Blocks", "tf_variables"]
