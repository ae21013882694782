"""Attention that does not keep its probability matrix.

Stock attention keeps softmax(QK^T / sqrt(d)) for the backward pass: a
[batch, heads, queries, keys] tensor, larger than the block's activations once
the token count passes the width (ViT-B/16 at 224: 12 x 197 x 197 numbers a
sample against 197 x 768). `lean_attention` keeps Q, K and V (which the stock
step keeps as well) and computes the probabilities again from Q and K once the
output gradient arrives, in the spirit of FlashAttention's recompute (Dao et al.,
NeurIPS 2022, https://arxiv.org/abs/2205.14135), without its tiling: the backward
pass holds one layer's probabilities at a time, the forward pass none.

Dropout on the probabilities draws a random mask that the backward pass would have
to replay; `LeanMultiHeadAttention` runs the stock code in training when its
dropout is on, and `tfseg.memory.rewrite` keeps such layers stock and says so.
"""

import keras
import tensorflow as tf
from keras import ops

from tfseg.layers.inplace_norm import _gated


def _large_negative(dtype):
    """What Keras' TensorFlow attention puts at masked logits, so outputs agree."""
    return tf.constant((65500.0 if dtype == tf.float16 else 3.38953e38) * -0.7, dtype)


def lean_attention(query, key, value, *, scale, mask=None, name=None):
    """softmax(scale * Q K^T, masked) V, keeping Q, K, V and the mask only.

    Args:
      query: [B, T, N, H]; key: [B, S, N, H]; value: [B, S, N, Hv].
      scale: the logits' factor, usually 1 / sqrt(H).
      mask: None or a boolean tensor broadcastable to [B, N, T, S] (True: attend).
      name: the name scope of the backward pass's ops.

    Returns [B, T, N, Hv] in value's dtype, with the arithmetic of
    `keras.ops.dot_product_attention` on TensorFlow (logits and softmax in float32
    for half types, float64 kept).
    """
    stat = tf.float64 if query.dtype == tf.float64 else tf.float32
    dtypes = (query.dtype, key.dtype, value.dtype)

    def probabilities(q, k):
        logits = tf.cast(tf.einsum("BTNH,BSNH->BNTS", q, k), stat) * tf.cast(scale, stat)
        if mask is not None:
            logits = tf.where(mask, logits, _large_negative(stat))
        return tf.nn.softmax(logits, axis=-1)

    @tf.custom_gradient
    def forward(q, k, v):
        # stop_gradient: eager ops in here would otherwise stay on the outer tape (P1).
        q, k, v = (tf.stop_gradient(t) for t in (q, k, v))
        out = tf.einsum("BNTS,BSNH->BTNH", tf.cast(probabilities(q, k), k.dtype), v)

        def backward(dy):
            with tf.name_scope(name or "attention"):
                # P2: everything made from the kept tensors waits for dy (a half-precision
                # cast of Q, K or V would otherwise be made, and kept, in the forward pass).
                q_g, k_g, v_g = (_gated(t, dy) for t in (q, k, v))
                p = probabilities(q_g, k_g)
                dy_s, q_s, k_s, v_s = (tf.cast(t, stat) for t in (dy, q_g, k_g, v_g))
                dv = tf.einsum("BNTS,BTNH->BSNH", p, dy_s)
                dp = tf.einsum("BTNH,BSNH->BNTS", dy_s, v_s)
                dlogits = p * (dp - tf.reduce_sum(dp * p, -1, keepdims=True))
                if mask is not None:
                    # A row that sees no key is uniform over masked logits: their constant
                    # fill takes no gradient (stock's tf.where sends none back).
                    dlogits = tf.where(mask, dlogits, tf.zeros_like(dlogits))
                dlogits *= tf.cast(scale, stat)
                dq = tf.einsum("BNTS,BSNH->BTNH", dlogits, k_s)
                dk = tf.einsum("BNTS,BTNH->BSNH", dlogits, q_s)
                return [tf.cast(g, d) for g, d in zip((dq, dk, dv), dtypes)]

        return out, backward

    return forward(query, key, value)


@keras.saving.register_keras_serializable(package="tfseg")
class LeanMultiHeadAttention(keras.layers.MultiHeadAttention):
    """Drop-in twin of `keras.layers.MultiHeadAttention` that does not keep the
    attention probabilities (`lean_attention`).

    Same arguments and variables (query/key/value/attention_output projections),
    names and order. The stock code runs where the twin does not apply: attention
    scores returned, dropout in training, or more than one attention axis (a causal
    mask arrives as a mask). Shapes: as the stock layer's.

    Example:

    >>> attention = LeanMultiHeadAttention(num_heads=2, key_dim=4)
    >>> attention(tf.ones([2, 9, 8]), tf.ones([2, 9, 8])).shape
    TensorShape([2, 9, 8])
    """

    def _compute_attention(self, query, key, value, attention_mask=None, training=None,
                           return_attention_scores=False, use_causal_mask=False):
        if (return_attention_scores or (training and self._dropout > 0.0)
                or len(query.shape) != 4):
            return super()._compute_attention(
                query, key, value, attention_mask=attention_mask, training=training,
                return_attention_scores=return_attention_scores,
                use_causal_mask=use_causal_mask)
        mask = None
        if attention_mask is not None:  # [B, T, S] -> [B, 1, T, S], as the stock code
            mask = ops.cast(attention_mask, "bool")
            while len(mask.shape) < 4:
                mask = ops.expand_dims(mask, axis=-3)
        out = lean_attention(query, key, value, scale=self._inverse_sqrt_key_dim, mask=mask,
                             name=self.name)
        return out, None
