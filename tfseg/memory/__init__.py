"""Memory-saving graph rewrites, and weights that move between the twins."""

from tfseg.memory.rewrite import Plan, Segment, plan, rewrite
from tfseg.memory.weights import checkpoint, copy_weights, variables_by_path

__all__ = ["Plan", "Segment", "checkpoint", "copy_weights", "plan", "rewrite", "variables_by_path"]
