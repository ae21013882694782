"""keras-hub's blocks whose `call` the rewrite knows (`tfseg.memory.blocks`).

Imported by `tfseg.memory.blocks` only once keras-hub is; each entry names the file of
keras-hub 0.32 it reads. A keras-hub whose classes moved registers nothing (their blocks
stay stock); one whose attributes changed keeps the pair stock and says why
(`tfseg.memory.inside`); one whose block computes otherwise fails
`tests/memory/test_hub.py` (the rewritten model's outputs and gradients against stock).
"""

import logging

from tfseg.memory.blocks import register_block

try:
    from keras_hub.src.layers.modeling.transformer_encoder import TransformerEncoder
    from keras_hub.src.models.vit.vit_layers import MLP
except ImportError as error:  # another keras-hub: its blocks stay stock
    logging.getLogger("tfseg.memory").info("keras-hub's blocks are not registered: %s",
                                           error)
    TransformerEncoder = MLP = None


@register_block(MLP)
def _vit_mlp(layer):
    """ViT's MLP (`models/vit/vit_layers.py`): dense_1 (GELU) -> dropout -> dense_2 ->
    dropout. The dropout between is the identity only at rate 0."""
    if layer.dropout_rate:
        return [], f"dropout {layer.dropout_rate:g} between its two Dense layers"
    return [("dense_1", "dense_2")], None


@register_block(TransformerEncoder)
def _transformer_encoder(layer):
    """keras-hub's `TransformerEncoder` (`layers/modeling/transformer_encoder.py`): the
    feedforward's intermediate Dense (its activation) feeds its output Dense alone."""
    return [("_feedforward_intermediate_dense", "_feedforward_output_dense")], None
