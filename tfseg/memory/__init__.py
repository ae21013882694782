"""Memory-saving graph rewrites, and weights that move between the twins."""

from tfseg.memory.patterns import Changes, changes
from tfseg.memory.segments import Segment
from tfseg.memory.rewrite import rewrite
from tfseg.memory.weights import checkpoint, copy_weights, variables_by_path

__all__ = ["Changes", "Segment", "changes", "checkpoint", "copy_weights", "rewrite",
           "variables_by_path"]
