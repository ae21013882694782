"""Every read of Keras's private attributes, each behind one named function.

The rewrite, the recompute blocks and the split read a functional model's graph as Keras
keeps it: which node made a tensor, a layer's calls, a model's nodes by depth, the
sublayers a layer tracks. Keras has no public way to ask these, so each is read here and
nowhere else: a Keras release that renames one breaks this module, and
`tests/test_keras_graph.py` says which function.

Checked against the Keras versions in `CHECKED`.

Example:

>>> inputs = keras.Input((8, 8, 3))
>>> x = keras.layers.Conv2D(4, 3, name="conv")(inputs)
>>> model = keras.Model(inputs, keras.layers.ReLU(name="relu")(x))
>>> producer(model.output).name
'relu'
>>> [node.operation.name for node in nodes_in_order(model)]
['conv', 'relu']
"""

import keras

__all__ = ["CHECKED", "call_nodes", "direct_sublayers", "forget_calls", "has_graph",
           "has_history", "history", "input_structure", "nodes_by_depth", "nodes_in_order",
           "output_structure", "parent_path", "producer", "producing_node",
           "remake_variable", "sequential_graph", "set_direct_sublayers",
           "set_parent_path", "set_variable_value", "slot_index", "sublayers",
           "variable_value"]

# The Keras versions this module's reads were checked against (`tests/test_keras_graph.py`).
CHECKED = ("3.15",)


def sublayers(layer, include_self=False, recursive=True):
    """The layers `layer` tracks, depth first (`Layer._flatten_layers`): a subclassed
    layer's sublayers are not listed by any public attribute (`Model.layers` lists only a
    functional model's own)."""
    return list(layer._flatten_layers(include_self=include_self, recursive=recursive))


def direct_sublayers(layer):
    """The sublayers `layer` itself tracks, in the order it set them (`Layer._layers`)."""
    return list(layer._layers)


def set_direct_sublayers(layer, layers):
    """Makes `layer` track exactly `layers` (a copy sharing some of its original's
    sublayers); written to `__dict__`, as Keras's attribute tracking would otherwise
    track them a second time."""
    layer.__dict__["_layers"] = list(layers)


def forget_calls(layer):
    """Empties the call records of `layer`, a copy made from another's `__dict__`: the copy
    is called on its own inputs later, and the original's nodes are not its calls."""
    layer.__dict__["_inbound_nodes"], layer.__dict__["_outbound_nodes"] = [], []


def parent_path(layer):
    """The path prefix Keras gives the variables `layer` creates (`Layer._parent_path`),
    or None: a twin built in its stock layer's place takes it, so the variable paths stay."""
    return getattr(layer, "_parent_path", None)


def set_parent_path(layer, path):
    layer._parent_path = path


def has_history(tensor):
    """Whether `tensor` is a symbolic tensor a layer's call made (it has a history)."""
    return getattr(tensor, "_keras_history", None) is not None


def history(tensor):
    """(operation, node index, tensor index) of a symbolic tensor (`_keras_history`)."""
    operation, node_index, tensor_index = tensor._keras_history
    return operation, node_index, tensor_index


def producer(tensor):
    """The layer (or operation) whose call made the symbolic `tensor`."""
    return history(tensor)[0]


def producing_node(tensor):
    """The node (the call) that made the symbolic `tensor`."""
    operation, index, _ = history(tensor)
    return call_nodes(operation)[index]


def call_nodes(layer):
    """The nodes of `layer`'s calls on symbolic inputs, in order (`_inbound_nodes`): a layer
    called twice has two, and keeps one set of variables."""
    return list(layer._inbound_nodes)


def sequential_graph(model):
    """The functional model a built `keras.Sequential` runs (`Sequential._functional`), or
    None before it is built."""
    return getattr(model, "_functional", None)


def has_graph(model):
    """Whether `model` is a functional model (or one built as one): it has nodes by depth."""
    return hasattr(model, "_nodes_by_depth")


def nodes_by_depth(model):
    """A functional model's nodes, depth -> nodes (`Functional._nodes_by_depth`); depth 0
    holds the outputs' nodes. A built `Sequential`'s are its graph's."""
    if isinstance(model, keras.Sequential):
        model = sequential_graph(model)
    return model._nodes_by_depth


def nodes_in_order(model, inputs=False):
    """A functional model's nodes in the order they run (the deepest first); its input
    nodes too where `inputs`."""
    by_depth = nodes_by_depth(model)
    return [node for depth in sorted(by_depth, reverse=True) for node in by_depth[depth]
            if inputs or not node.is_input]


def input_structure(model):
    """The structure of a functional model's inputs as it was built (a dict, a list, one
    tensor: `Functional._inputs_struct`); `model.inputs` is flattened. A built
    `Sequential`'s are its graph's."""
    if isinstance(model, keras.Sequential):
        model = sequential_graph(model)
    return model._inputs_struct


def output_structure(model):
    """The structure of a functional model's outputs as it was built (`_outputs_struct`);
    a built `Sequential`'s are its graph's."""
    if isinstance(model, keras.Sequential):
        model = sequential_graph(model)
    return model._outputs_struct


def remake_variable(variable, value):
    """Makes `variable`'s backend value again from `value` (`Variable._initialize`), under
    the caller's device scope: there is no public way to move a variable to a device."""
    variable._initialize(value)


def slot_index(optimizer, variable):
    """The index of `variable`'s slots (momentum ...) in a built Keras `optimizer`
    (`Optimizer._get_variable_index`): the slots are listed, not keyed by variable."""
    return optimizer._get_variable_index(variable)


def variable_value(variable):
    """The backend value a `keras.Variable` reads (`Variable._value`)."""
    return variable._value


def set_variable_value(variable, value):
    """Points a `keras.Variable` at another backend value (a compiled block's own
    resource) without an assignment, which would copy it."""
    variable._value = value

