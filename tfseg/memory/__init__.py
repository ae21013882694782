"""Memory-saving graph rewrites, and weights that move between the twins."""

import wrapt

from tfseg.memory.options import RewriteOptions
from tfseg.memory.patterns import Changes, changes
from tfseg.memory.segments import Segment
from tfseg.memory.twins import Twin, add_twin
from tfseg.memory.rewrite import as_functional, rewrite
from tfseg.memory.paying import may_keep_more, paying, weigh
from tfseg.memory.weights import checkpoint, copy_weights, variables_by_path

__all__ = ["Changes", "RewriteOptions", "Segment", "Twin", "add_twin", "as_functional",
           "changes", "checkpoint", "copy_weights", "may_keep_more", "paying", "rewrite",
           "variables_by_path", "weigh"]


def _register_hub_blocks(keras_hub):
    """keras-hub is optional: its blocks' entries (`hub_blocks`) register themselves in
    `tfseg.memory.blocks` once it is imported (now, if it already is), since a model
    made of its layers has imported it."""
    from tfseg.memory import hub_blocks  # noqa: F401  (registers on import)


wrapt.register_post_import_hook(_register_hub_blocks, "keras_hub")
