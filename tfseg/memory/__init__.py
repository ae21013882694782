"""Memory-saving graph rewrites, and weights that move between the twins."""

from tfseg.memory.patterns import Changes, changes
from tfseg.memory.segments import Segment
from tfseg.memory.rewrite import as_functional, rewrite
from tfseg.memory.weights import checkpoint, copy_weights, variables_by_path

__all__ = ["Changes", "Segment", "as_functional", "changes", "checkpoint", "copy_weights",
           "rewrite", "variables_by_path"]
