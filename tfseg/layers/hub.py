"""Twins of keras-hub blocks that compute in their own `call` (keras-hub 0.32's
`models/mit/mit_layers.py`, `models/vit/vit_layers.py`, `models/vit_det/vit_layers.py`,
`models/swin_transformer/swin_transformer_layers.py`): subclasses that add no state, so a rebuilt copy's block
becomes one by taking its class (`tfseg.memory.inside`).

keras-hub is optional and this module imports it, so `tfseg.layers` does not import
this module: `tfseg.memory.hub_blocks`, which places these twins, does, once keras-hub
is loaded. They are not registered with Keras serialization, as their stock blocks are
not: neither's constructor takes its config back (it has no `**kwargs`), and the rewrite copies the
block that holds them with a registered function (`tfseg.memory.blocks.register_rebuild`).
`tests/memory/test_hub.py` checks each against its stock block in float64.

Example (keras-hub installed):

>>> import keras
>>> from tfseg.layers.hub import LeanMixFFN
>>> block = LeanMixFFN(channels=8, mid_channels=32)
>>> tuple(block(keras.ops.ones((1, 16, 8))).shape)  # [batch, tokens (a square), width]
(1, 16, 8)
"""

import math

import keras
from keras import ops
from keras_hub.src.models.mit.mit_layers import MixFFN, SegFormerMultiheadAttention
from keras_hub.src.models.swin_transformer.swin_transformer_layers import WindowAttention
from keras_hub.src.models.vit.vit_layers import MLP
from keras_hub.src.models.vit_det.vit_layers import MLP as ViTDetMLP
from keras_hub.src.models.vit_det.vit_layers import MultiHeadAttentionWithRelativePE

from tfseg.layers.attention import keras_seed, lean_attention


class LeanMixFFN(MixFFN):
    """SegFormer's MixFFN whose GELU (tanh-approximated, `ops.nn.gelu`'s default) runs
    inside fc2, an `ActivationDense`: the depthwise conv's output is kept, not the
    GELU's terms and output (four tensors of 4x the width at stage 1).

    Arguments are MixFFN's (`channels`, `mid_channels`); x: [batch, side * side,
    channels] -> [batch, side * side, channels]. Alone, fc2 is a stock Dense and the
    block computes without the GELU: the rewrite gives fc2 its `ActivationDense`."""

    def call(self, x):  # MixFFN.call less the GELU
        x = self.fc1(x)
        shape = ops.shape(x)
        side = int(math.sqrt(shape[1]))
        x = ops.reshape(x, (shape[0], side, side, shape[2]))
        x = ops.reshape(self.dwconv(x), (shape[0], -1, shape[2]))
        return self.fc2(x)


class LeanSegFormerAttention(SegFormerMultiheadAttention):
    """SegFormer's efficient attention (queries against a spatially reduced sequence)
    through `lean_attention`: its probabilities are not kept, and their dropout's mask
    is drawn again from the seed Keras' `Dropout` would draw.

    Arguments are SegFormerMultiheadAttention's (`project_dim`, `num_heads`,
    `sr_ratio`); x: [batch, side * side, project_dim] -> the same shape."""

    def call(self, x):  # SegFormerMultiheadAttention.call, its attention lean
        if self.dropout.rate >= 1.0:  # stock's dropout then returns zeros
            return super().call(x)
        batch, tokens, width = ops.shape(x)
        side, heads = int(math.sqrt(tokens)), self.num_heads
        q = ops.reshape(self.q(x), (batch, tokens, heads, width // heads))
        if self.sr_ratio > 1:
            x = self.sr(ops.reshape(x, (batch, side, side, width)))
            x = self.norm(ops.reshape(x, (batch, -1, width)))
        k = ops.reshape(self.k(x), (batch, -1, heads, width // heads))
        v = ops.reshape(self.v(x), (batch, -1, heads, width // heads))
        context = self._get_call_context()  # Keras' record of the `training` in force
        dropout = None
        if getattr(context, "training", None) and self.dropout.rate > 0:
            dropout = (self.dropout.rate, keras_seed(self.dropout.seed_generator))
        # The scale in q's dtype, as stock's `* self.scale` takes it (float64 exact).
        scale = ops.convert_to_tensor(self.scale, dtype=q.dtype)
        out = lean_attention(q, k, v, scale=scale, dropout=dropout, name=self.name)
        return self.proj_drop(self.proj(ops.reshape(out, (batch, tokens, width))))


class LeanViTMLP(MLP):
    """ViT's MLP, dense_1 (GELU) -> dropout -> dense_2 -> dropout, whose GELU and first
    dropout run inside dense_2, an `ActivationDense`: dense_1's output is kept, not the
    GELU's output nor the dropped one, each 4x the width (`mlp_dim`); the mask is drawn
    again from the seed Keras' `Dropout` draws, so the outputs are stock's, mask and all.

    Arguments are MLP's (`hidden_dim`, `mlp_dim`, `dropout_rate`); x: [batch, tokens,
    hidden_dim] -> the same shape. Alone, dense_1 keeps its GELU and dense_2 is stock:
    the rewrite makes dense_1 linear and dense_2 an `ActivationDense`."""

    def call(self, inputs):  # MLP.call, its first dropout handed to dense_2
        context = self._get_call_context()  # Keras' record of the `training` in force
        dropout = None
        if getattr(context, "training", None) and self.dropout.rate > 0:
            dropout = (self.dropout.rate, keras_seed(self.dropout.seed_generator))
        h = self.dense_1(inputs)
        if dropout is None:
            return self.dropout(self.dense_2(h))
        # `call` itself: Keras binds a layer's call arguments by the signature of the class
        # it was made as, and the rewrite makes a stock Dense this twin after that.
        with keras.name_scope(self.dense_2.name):
            return self.dropout(self.dense_2.call(h, dropout=dropout))


class LeanRelativeAttention(MultiHeadAttentionWithRelativePE):
    """SAM's (ViTDet's) attention with decomposed relative positions through
    `lean_attention`: the probabilities over the window's (or the image's) tokens are
    not kept, nor the logits with the positions added; the position terms go in as
    rows and columns (`bias`), each [tokens, side] a head.

    Arguments are MultiHeadAttentionWithRelativePE's (`num_heads`, `key_dim`,
    `use_rel_pos`, `input_size`); x: [batch, height, width, channels] -> the same."""

    def call(self, x):  # MultiHeadAttentionWithRelativePE.call, its attention lean
        batch, height, width, channels = ops.shape(x)
        heads, dim = self.num_heads, self.key_dim
        qkv = ops.reshape(self.qkv(x), (batch, height * width, 3, heads, dim))
        q, k, v = (qkv[:, :, i] for i in range(3))  # each [batch, tokens, heads, dim]
        bias = (self._positions(q, height, width),) if self.use_rel_pos else ()
        scale = ops.convert_to_tensor(self.scale, dtype=q.dtype)
        out = lean_attention(q, k, v, scale=scale, bias=bias, name=self.name)
        return self.projection(ops.reshape(out, (batch, height, width, channels)))

    def _positions(self, q, height, width):
        """AddRelativePositionalEmbedding's terms, unsummed: ([batch, heads, tokens,
        height], [batch, heads, tokens, width])."""
        embedding = self.add_decomposed_relative_pe
        grid = ops.reshape(ops.transpose(q, (0, 2, 1, 3)),
                           (-1, self.num_heads, height, width, self.key_dim))
        rows = ops.einsum("bnhwc,hkc->bnhwk", grid,
                          embedding._get_rel_pos(height, height, embedding.rel_pos_h))
        columns = ops.einsum("bnhwc,wkc->bnhwk", grid,
                             embedding._get_rel_pos(width, width, embedding.rel_pos_w))
        tokens = (-1, self.num_heads, height * width)
        return ops.reshape(rows, (*tokens, height)), ops.reshape(columns, (*tokens, width))


class LeanWindowAttention(WindowAttention):
    """Swin's window attention through `lean_attention`: the probabilities of each
    window are not kept; the relative position bias ([heads, tokens, tokens]) and the
    shifted windows' mask go in as bias terms, the dropout's mask drawn again from the
    seed Keras' `Dropout` draws.

    Arguments are WindowAttention's (`dim`, `num_heads`, `window_size`, ...); x:
    [windows * batch, tokens, dim] -> the same shape."""

    def call(self, x, mask=None, return_attns=False):  # WindowAttention.call, lean
        dropping = self.attention_dropout_layer
        if return_attns or dropping.rate >= 1.0:  # the probabilities asked for, or zeros
            return super().call(x, mask=mask, return_attns=return_attns)
        windows, tokens, channels = ops.shape(x)[0], ops.shape(x)[1], ops.shape(x)[2]
        qkv = ops.reshape(self.qkv(x), (windows, tokens, 3, self.num_heads, -1))
        q, k, v = (qkv[:, :, i] for i in range(3))
        bias = [self._get_rel_pos_bias()[None]]
        if mask is not None:  # window w of each image takes mask[w]
            per_image = ops.tile(mask[None], (windows // ops.shape(mask)[0], 1, 1, 1))
            bias.append(ops.reshape(per_image, (-1, 1, tokens, tokens)))
        context = self._get_call_context()  # Keras' record of the `training` in force
        dropout = None
        if getattr(context, "training", None) and dropping.rate > 0:
            dropout = (dropping.rate, keras_seed(dropping.seed_generator))
        scale = ops.convert_to_tensor(self.scale, dtype=q.dtype)
        out = lean_attention(q, k, v, scale=scale, bias=tuple(bias), dropout=dropout,
                             name=self.name)
        return self.proj_drop(self.proj(ops.reshape(out, (windows, tokens, channels))))


class LeanViTDetMLP(ViTDetMLP):
    """SAM's (ViTDet's) MLP, a `Sequential` of Dense -> Activation (GELU) -> Dense, whose
    activation runs inside the second Dense, an `ActivationDense`: the first Dense's
    output is kept, not the activation's (each 4x the width).

    Arguments are the MLP's (`intermediate_dim`, `hidden_dim`, `activation`); x: [...,
    width] -> [..., hidden_dim]. Alone, the second Dense is stock and the block computes
    without the activation: the rewrite gives it its `ActivationDense`."""

    def call(self, x):  # MLP.call: its Sequential, less the activation layer
        first, _, second = self.dense_net.layers
        return second(first(x))
