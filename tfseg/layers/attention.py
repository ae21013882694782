"""Attention that does not keep its probability matrix.

Stock attention keeps softmax(QK^T / sqrt(d)) for the backward pass: a
[batch, heads, queries, keys] tensor, larger than the block's activations once
the token count passes the width (ViT-B/16 at 224: 12 x 197 x 197 numbers a
sample against 197 x 768). `lean_attention` keeps Q, K and V (which the stock
step keeps as well) and computes the probabilities again from Q and K once the
output gradient arrives, in the spirit of FlashAttention's recompute (Dao et al.,
NeurIPS 2022, https://arxiv.org/abs/2205.14135), without its tiling: the backward
pass holds one layer's probabilities at a time, the forward pass none.

Dropout on the probabilities draws a random mask that the backward pass must
replay: `lean_attention` takes the seed Keras' `Dropout` would draw and draws the
same mask again from it (`tf.nn.experimental.stateless_dropout`, as Keras does on
TensorFlow), so a twin whose dropout starts from the stock layer's seed state drops
what stock drops.
"""

import keras
import tensorflow as tf
from keras import ops

from tfseg.layers.gating import gated


def _large_negative(dtype):
    """What Keras' TensorFlow attention puts at masked logits, so outputs agree."""
    return tf.constant((65500.0 if dtype == tf.float16 else 3.38953e38) * -0.7, dtype)


def keras_seed(generator):
    """The int32 seed `keras.random.dropout(..., seed=generator)` draws on TensorFlow
    (and the generator advances as it does there)."""
    seed = generator.next()
    if seed.dtype == tf.int32:
        return seed
    return tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)


def _reduced(grad, like):
    """`grad` of a tensor broadcast to its shape, summed back to `like`'s shape."""
    axes, _ = tf.raw_ops.BroadcastGradientArgs(s0=tf.shape(like), s1=tf.shape(grad))
    return tf.reshape(tf.reduce_sum(grad, axes), tf.shape(like))


def _biased(logits, biases):
    """`logits` [B, N, T, S] plus each of `biases` (`lean_attention`'s)."""
    for term in biases:
        if isinstance(term, tuple):  # rows [.., T, Sh] and columns [.., T, Sw]: S = Sh * Sw
            rows, columns = term
            grid = tf.concat([tf.shape(logits)[:-1], [rows.shape[-1], columns.shape[-1]]], 0)
            logits = tf.reshape(tf.reshape(logits, grid) + rows[..., :, None]
                                + columns[..., None, :], tf.shape(logits))
        else:
            logits = logits + term
    return logits


def _bias_grads(dlogits, biases):
    """The gradients of `biases` (flat, in order) from the logits' gradient."""
    grads = []
    for term in biases:
        if isinstance(term, tuple):
            rows, columns = term
            grid = tf.concat([tf.shape(dlogits)[:-1], [rows.shape[-1], columns.shape[-1]]], 0)
            g = tf.reshape(dlogits, grid)
            grads += [_reduced(tf.reduce_sum(g, -1), rows), _reduced(tf.reduce_sum(g, -2), columns)]
        else:
            grads.append(_reduced(dlogits, term))
    return grads


def _grouped(tensors, terms):
    """`tensors` (the bias terms flat) in `terms`' structure: a pair stays a pair."""
    grouped = []
    for term in terms:
        n = 2 if isinstance(term, tuple) else 1
        grouped.append(tuple(tensors[:n]) if n == 2 else tensors[0])
        tensors = tensors[n:]
    return grouped


def _dropped(t, dropout, seed=None):
    """`t` through `dropout` ((rate, seed) or None), from `seed` where given."""
    if dropout is None:
        return t
    seed = dropout[1] if seed is None else seed
    return tf.nn.experimental.stateless_dropout(t, rate=dropout[0], seed=seed)


def _logits_grad(p, dp, mask):
    """The softmax's input gradient from its output `p` and output gradient `dp`."""
    dlogits = p * (dp - tf.reduce_sum(dp * p, -1, keepdims=True))
    if mask is not None:
        # A row that sees no key is uniform over masked logits: their constant fill
        # takes no gradient (stock's tf.where sends none back).
        dlogits = tf.where(mask, dlogits, tf.zeros_like(dlogits))
    return dlogits


def _probabilities(q, k, biases, scale, mask):
    """softmax(scale * Q K^T + biases, masked) [B, N, T, S], in `scale`'s float type."""
    stat = scale.dtype
    logits = _biased(tf.cast(tf.einsum("BTNH,BSNH->BNTS", q, k), stat) * scale, biases)
    if mask is not None:
        logits = tf.where(mask, logits, _large_negative(stat))
    return tf.nn.softmax(logits, axis=-1)


def _attention_grads(dy, kept, terms, scale, mask, dropout):
    """The gradients of Q, K, V and the flat bias terms (in `scale`'s float type) from
    the output gradient `dy` and the kept `(q, k, v, *flat biases)` of `lean_attention`."""
    stat = scale.dtype
    # Everything made from the kept tensors waits for dy: a half-precision
    # cast of Q, K or V would otherwise be made, and kept, in the forward pass.
    q, k, v, *biases = (gated(t, dy) for t in kept)
    biases = _grouped([tf.cast(t, stat) for t in biases], terms)
    p = _probabilities(q, k, biases, scale, mask)
    dy_s, q_s, k_s, v_s = (tf.cast(t, stat) for t in (dy, q, k, v))
    applied, kept_mask = p, None
    if dropout is not None:
        # The mask over (1 - rate), drawn again from the seed once dy exists
        # (from the seed alone TF would draw it in the forward pass and keep
        # it); p * it is what stock's dropout(p) makes, to the bit.
        p_v = tf.cast(p, v.dtype)
        kept_mask = _dropped(tf.ones_like(p_v), dropout, seed=gated(dropout[1], dy))
        applied = tf.cast(p_v * kept_mask, stat)
    dv = tf.einsum("BNTS,BTNH->BSNH", applied, dy_s)
    dp = tf.einsum("BTNH,BSNH->BNTS", dy_s, v_s)
    if kept_mask is not None:  # d dropout(p) / dp
        dp *= tf.cast(kept_mask, stat)
    dlogits = _logits_grad(p, dp, mask)
    db = _bias_grads(dlogits, biases)
    dlogits *= scale
    dq = tf.einsum("BNTS,BSNH->BTNH", dlogits, k_s)
    dk = tf.einsum("BNTS,BTNH->BSNH", dlogits, q_s)
    return (dq, dk, dv, *db)


def lean_attention(query, key, value, *, scale, mask=None, bias=(), dropout=None, name=None):
    """softmax(scale * Q K^T + bias, masked) V, keeping Q, K, V, the mask and the bias
    terms only.

    Args:
      query: [B, T, N, H]; key: [B, S, N, H]; value: [B, S, N, Hv].
      scale: the logits' factor, usually 1 / sqrt(H): a Python number (through
        float32, as Keras' attention takes it) or a tensor (e.g. float64 to keep it
        exact).
      mask: None or a boolean tensor broadcastable to [B, N, T, S] (True: attend).
      bias: terms added to the scaled logits, each differentiable: a tensor
        broadcastable to [B, N, T, S] (Swin's relative position bias [1, N, T, T]), or
        a pair (rows [B, N, T, Sh], columns [B, N, T, Sw]) of a key grid S = Sh x Sw,
        adding rows[..., i] + columns[..., j] at key (i, j) (SAM's decomposed relative
        positions): the [T, S] sum is never made, so never kept.
      dropout: None or (rate, seed): dropout on the probabilities (in value's dtype),
        0 < rate < 1, drawn as Keras' `Dropout` draws it from the int32 seed
        (`keras_seed`); the backward pass draws the same mask again, once, after dy.
      name: the name scope of the backward pass's ops.

    Returns [B, T, N, Hv] in value's dtype, with the arithmetic of
    `keras.ops.dot_product_attention` on TensorFlow (logits and softmax in float32
    for half types, float64 kept).
    """
    stat = tf.float64 if query.dtype == tf.float64 else tf.float32
    terms = tuple(bias)
    flat = [t for term in terms for t in (term if isinstance(term, tuple) else (term,))]
    dtypes = [t.dtype for t in (query, key, value, *flat)]
    # A Python float becomes a float32 constant first, as in Keras' attention.
    scale = tf.cast(scale, stat)

    @tf.custom_gradient
    def forward(q, k, v, *biases):
        # stop_gradient: eager ops in here would otherwise stay on an outer tape, which
        # would keep their inputs.
        q, k, v, *biases = (tf.stop_gradient(t) for t in (q, k, v, *biases))
        p = _probabilities(q, k, _grouped([tf.cast(t, stat) for t in biases], terms), scale, mask)
        out = tf.einsum("BNTS,BSNH->BTNH", _dropped(tf.cast(p, v.dtype), dropout), v)

        def backward(dy):
            with tf.name_scope(name or "attention"):
                grads = _attention_grads(dy, (q, k, v, *biases), terms, scale, mask, dropout)
                return [tf.cast(g, d) for g, d in zip(grads, dtypes)]

        return out, backward

    return forward(query, key, value, *flat)


@keras.saving.register_keras_serializable(package="tfseg")
class LeanMultiHeadAttention(keras.layers.MultiHeadAttention):
    """Drop-in twin of `keras.layers.MultiHeadAttention` that does not keep the
    attention probabilities (`lean_attention`).

    Same arguments and variables (query/key/value/attention_output projections),
    names and order; dropout on the probabilities is replayed from its seed. The
    stock code runs where the twin does not apply: attention scores returned, more than
    one attention axis (a causal mask arrives as a mask), dropout with a mask (stock's
    softmax then zeroes a query that sees no key) or at rate 1. Shapes: as the stock
    layer's.

    Example:

    >>> attention = LeanMultiHeadAttention(num_heads=2, key_dim=4)
    >>> attention(tf.ones([2, 9, 8]), tf.ones([2, 9, 8])).shape
    TensorShape([2, 9, 8])
    """

    def _compute_attention(self, query, key, value, attention_mask=None, training=None,
                           return_attention_scores=False, use_causal_mask=False):
        # With dropout on, stock runs its einsum path, whose masked softmax gives zeros
        # to a query that sees no key (lean_attention: a uniform row); rate 1: zeros.
        if (return_attention_scores or len(query.shape) != 4 or self._dropout >= 1.0
                or (self._dropout > 0.0 and attention_mask is not None)):
            return super()._compute_attention(
                query, key, value, attention_mask=attention_mask, training=training,
                return_attention_scores=return_attention_scores,
                use_causal_mask=use_causal_mask)
        mask = None
        if attention_mask is not None:  # [B, T, S] -> [B, 1, T, S], as the stock code
            mask = ops.cast(attention_mask, "bool")
            while len(mask.shape) < 4:
                mask = ops.expand_dims(mask, axis=-3)
        dropout = None
        if training and self._dropout > 0.0:  # the seed the stock Dropout would draw
            dropout = (self._dropout, keras_seed(self._dropout_layer.seed_generator))
        out = lean_attention(query, key, value, scale=self._inverse_sqrt_key_dim, mask=mask,
                             dropout=dropout,
                             name=self.name)
        return out, None
