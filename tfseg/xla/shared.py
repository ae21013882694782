"""One compiled function for blocks of the same structure: the layers of the first run
with the variables of whichever block calls it.

The 16 middle units of Xception-65 are the same computation on different weights. Each
compiled on its own would cost 16 compilations of the same code. Here a block's
function takes its variables as arguments: inside, the first block's layers (the
template) read them, because each of the template's Keras variables is pointed, while
the function is traced, at a variable made on the argument's handle. TensorFlow traces
the function once for all blocks of its shapes, and XLA compiles it once.

TensorFlow builds the function's backward pass later, when the step asks for gradients;
a twin's custom gradient (a recomputation) then runs the template's layers again. For
them to read the arguments too, `Templates.backward()` points the template's variables
at the same handles while the gradients are built.

This is the one place that reads Keras's and TensorFlow's internals: where a Keras
variable keeps its TensorFlow variable (`_value`), a variable made on a given handle, and
how a backward pass refers to forward tensors (the zeros of unused gradients,
`FuncGraph.capture`). Gradients must be taken with a non-persistent tape inside `backward()` (the
training step's): TensorFlow then builds the backward pass at `tape.gradient`; with a
persistent or nested tape it builds it at the call, where the template's own variables
would be read.
"""

import contextlib

import keras
import tensorflow as tf
from tensorflow.python.framework import func_graph  # what a backward pass captures
from tensorflow.python.ops import control_flow_state  # the zeros of unused gradients
from tensorflow.python.ops import resource_variable_ops  # a variable on a given handle

from tfseg import keras_graph


class Template:
    """The layers of one block (`variables`: theirs, in a fixed order), run with another
    block's variables of the same shapes."""

    def __init__(self, variables):
        self.variables = list(variables)
        self._traced = []  # the variables made on the arguments' handles, by each trace

    @contextlib.contextmanager
    def reading(self, arguments):
        """While entered, inside a function being traced whose arguments include the
        TensorFlow variables `arguments` (one per template variable, in order), the
        template's layers read and assign those."""
        made = [_on_handle(v) for v in arguments]
        self._traced.append(made)
        with _pointed(self.variables, made):
            yield

    @contextlib.contextmanager
    def backward(self):
        """While entered, the template's layers read the handles of its function's
        trace: for the backward pass TensorFlow builds from that trace."""
        if not self._traced:
            yield
            return
        if len(self._traced) > 1:
            raise ValueError("a shared block was traced for several input shapes; its "
                             "backward pass would read one trace's variables")
        with _pointed(self.variables, self._traced[0]):
            yield


def keras_variables(layers):
    """The variables of `layers`, each once, in the order of the layers."""
    seen, found = set(), []
    for layer in layers:
        for v in layer.variables:
            if id(v) not in seen:
                seen.add(id(v))
                found.append(v)
    return found


def tf_variables(variables):
    """The TensorFlow variables of Keras variables (what a function takes as arguments)."""
    return [v.value if isinstance(v, keras.Variable) else v for v in variables]


def _on_handle(variable):
    """A variable of the graph being traced on `variable`'s handle there: reads and
    assignments go through the function's argument, and it is trainable as the
    argument is, so that a custom gradient inside gives it a gradient."""
    handle = tf.compat.v1.get_default_graph().capture(variable.handle)
    return resource_variable_ops.BaseResourceVariable(
        trainable=variable.trainable, shape=variable.shape, dtype=variable.dtype,
        handle=handle, unique_id=f"{variable._unique_id}_block",
        handle_name=variable._handle_name, in_graph_mode=True)


@contextlib.contextmanager
def _pointed(keras_variables_, targets):
    """Keras variables read and assign `targets` (TensorFlow variables) while entered."""
    before = [keras_graph.variable_value(v) for v in keras_variables_]
    for v, target in zip(keras_variables_, targets):
        keras_graph.set_variable_value(v, target)
    try:
        yield
    finally:
        for v, value in zip(keras_variables_, before):
            keras_graph.set_variable_value(v, value)


@contextlib.contextmanager
def zeros_from_shapes():
    """While entered, the zero gradients TensorFlow makes for an op's unused outputs are
    built from their static shapes, not as `ZerosLike(output)`.

    A twin's `tf.custom_gradient` passes its inputs and variables through an `IdentityN`
    whose extra outputs nobody reads; TensorFlow gives each a `ZerosLike` gradient. In one
    graph those ops are dead and pruned. But a block's backward pass is a function of its
    own: every forward tensor it refers to becomes an output of the forward function,
    kept until the backward runs, so each `ZerosLike` kept the very input that an
    output-only norm exists not to keep (the middle unit's forward returned 12 maps
    instead of 4). TensorFlow does the same for its while loops' gradients.
    """
    original = control_flow_state._ZerosLikeV2

    def zeros(op, index):
        value = op.outputs[index]
        if value.dtype in (tf.resource, tf.variant) or not value.shape.is_fully_defined():
            return original(op, index)
        return tf.zeros(value.shape, value.dtype)

    control_flow_state._ZerosLikeV2 = zeros
    try:
        yield
    finally:
        control_flow_state._ZerosLikeV2 = original


# Ops whose output is their input: the same value under another name.
_SAME_VALUE = ("Identity", "IdentityN", "StopGradient", "Snapshot")


def _source(tensor):
    """The tensor whose value ``tensor`` is, through ops that pass a value on."""
    while tensor.op.type in _SAME_VALUE:
        tensor = tensor.op.inputs[tensor.value_index if tensor.op.type == "IdentityN" else 0]
    return tensor


@contextlib.contextmanager
def captures_by_source(graphs):
    """While entered, a backward pass that refers to a tensor of a forward function in
    ``graphs`` (the blocks' traced functions) refers to the tensor whose value it is:
    one of the function's outputs where one has that value, else its source.

    TensorFlow makes each forward tensor that a function's backward pass refers to an
    output of the forward function, kept until the backward runs. A twin's custom
    gradient refers to its own output inside the `IdentityN` that `tf.custom_gradient`
    wraps it in, and the next layer's gradient to the wrapped one: one value, two
    outputs. XLA then copies one of them (an output tuple's elements must be distinct
    buffers), so each map an output-only norm keeps was kept twice (the middle unit's
    forward returned 8 maps for its 4).
    """
    original = func_graph.FuncGraph.capture

    def capture(self, tensor, name=None, shape=None):
        if isinstance(tensor, tf.Tensor) and getattr(tensor, "graph", None) in graphs:
            source = _source(tensor)
            tensor = next((out for out in tensor.graph.outputs if _source(out) is source),
                          source)
        return original(self, tensor, name, shape)

    func_graph.FuncGraph.capture = capture
    try:
        yield
    finally:
        func_graph.FuncGraph.capture = original
