"""Dense and EinsumDense layers that take in the activation before them: the
transformer MLP's twins.

In a stock MLP block, Dense(4C) -> GELU -> Dense(C), the GELU keeps its input h and
the second Dense keeps GELU's output: two tensors of 4x the model width. The twin
of GELU -> Dense keeps only h and runs the activation again once the output
gradient arrives (`tfseg.layers.keep_input.lean_conv` with a matmul for a conv), so
the block keeps one such tensor. Any elementwise activation works
(`tfseg.layers.elementwise`: GELU, swish, ReLU, ...).
"""

import keras
import tensorflow as tf
from keras import ops

from tfseg.layers.elementwise import TakesActivation
from tfseg.layers.keep_input import lean_conv


def _rows(t):
    return tf.reshape(t, [-1, tf.shape(t)[-1]])


def _matmul(t, kernel):
    return tf.linalg.matmul(t, kernel) if len(t.shape) == 2 else tf.tensordot(t, kernel, 1)


def _input_grad(shape, kernel, dy):
    return tf.reshape(tf.linalg.matmul(_rows(dy), kernel, transpose_b=True), shape)


def _kernel_grad(t, shape, dy):
    return tf.linalg.matmul(_rows(t), _rows(dy), transpose_a=True)


def _dropped(activation, rate, seed):
    """activation(t) then Keras' TensorFlow dropout with `seed`: the same mask each call."""
    function = tf.nn.relu if activation == "relu" else activation or tf.identity
    return lambda t: tf.nn.experimental.stateless_dropout(function(t), rate, seed=seed)


class _DenseTakesActivation(TakesActivation):
    """What both dense twins share beyond `TakesActivation` (whose default activation
    here is GELU's): `call`, the product (`_product`) through `lean_conv`, then the
    stock bias and activation."""

    def __init__(self, *args, input_activation="gelu", **kwargs):
        super().__init__(*args, input_activation=input_activation, **kwargs)

    def _product(self):
        """`lean_conv`'s product arguments: `conv` [, `input_grad`, `filter_grad`]."""
        raise NotImplementedError

    def call(self, inputs, training=None, dropout=None):
        """`dropout`: None, or (rate, int32 seed) of a dropout between the activation and
        the product (a ViT MLP's), whose mask is drawn again from the seed in the backward
        pass, not kept; `tfseg.layers.attention.keras_seed` draws the seed a Keras
        `Dropout` would."""
        kernel = ops.cast(self.kernel, self.compute_dtype)
        activation = self._input_fn
        if dropout is not None:
            activation = _dropped(activation, *dropout)
        outputs = lean_conv(inputs, kernel, activation=activation, name=self.name,
                            **self._product())
        if self.bias is not None:
            outputs = ops.add(outputs, ops.cast(self.bias, self.compute_dtype))
        return self.activation(outputs) if self.activation is not None else outputs


@keras.saving.register_keras_serializable(package="tfseg")
class ActivationDense(_DenseTakesActivation, keras.layers.Dense):
    """Drop-in twin of an elementwise activation -> `keras.layers.Dense`.

    Same arguments and variables as the Dense layer it replaces, plus
    `input_activation` (the activation taken in: "gelu", "relu", a
    `keras.activations` name or a serialized activation layer). Keeps only the
    activation's input. Shapes: [..., C] -> [..., units]. LoRA and quantized
    Dense layers are not twinned (`tfseg.memory.rewrite` keeps them stock).

    Example:

    >>> dense = ActivationDense(8, input_activation="gelu")
    >>> dense(tf.ones([2, 5, 16])).shape
    TensorShape([2, 5, 8])
    """

    def _product(self):
        return dict(conv=_matmul, input_grad=_input_grad, filter_grad=_kernel_grad)


@keras.saving.register_keras_serializable(package="tfseg")
class ActivationEinsumDense(_DenseTakesActivation, keras.layers.EinsumDense):
    """Drop-in twin of an elementwise activation -> `keras.layers.EinsumDense`.

    Same arguments and variables as the EinsumDense layer, plus `input_activation`
    (as `ActivationDense`'s). Keeps only the activation's input; the backward pass
    differentiates the einsum again from it. Shapes: as the equation says. LoRA and
    quantized layers are not twinned.

    Example:

    >>> dense = ActivationEinsumDense("abc,cd->abd", (None, 8), bias_axes="d")
    >>> dense(tf.ones([2, 5, 16])).shape
    TensorShape([2, 5, 8])
    """

    def _product(self):  # differentiated again in the backward pass
        return dict(conv=lambda t, k: tf.einsum(self.equation, t, k))
