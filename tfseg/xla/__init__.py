"""XLA for the training step: a model run as compiled blocks (`Blocks`), blocks of one
structure sharing one compiled function (`shared`, `signature`). The compilation cache a
second process reads is `tfseg.runtime.xla_cache`."""

from tfseg.xla.blocks import Blocks
from tfseg.xla.shared import tf_variables

__all__ = ["Blocks", "tf_variables"]
