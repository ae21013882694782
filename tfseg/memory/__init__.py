"""Memory-saving graph rewrites, and weights that move between the twins."""

from tfseg.memory.patterns import Plan, plan
from tfseg.memory.segments import Segment
from tfseg.memory.rewrite import rewrite
from tfseg.memory.weights import checkpoint, copy_weights, variables_by_path

__all__ = ["Plan", "Segment", "checkpoint", "copy_weights", "plan", "rewrite", "variables_by_path"]
