"""Subclassed blocks taken apart from a trace of their `call`.

keras-hub builds many backbones of subclassed blocks (MobileNetV3's
`InvertedResidualBlock`, HGNetV2's stages, DINOv2's and DeiT's encoder layers). The
functional rewrite sees each as one opaque node, so a conv, its norm and its
activation inside one are never fused. Calling the block's `call` on new
`keras.Input`s records what it does as a functional graph of its own sublayers (the
same objects, so the same variables at the same paths): a model the rewrite takes apart
as it does a backbone nested in a task model.

A trace stands for the block only where it is the block's whole computation:

- every variable of the block (weights and random states) is one of its sublayers', so
  none is read in `call` as a constant of the graph;
- its `call` runs on symbolic tensors: only Keras layers and `keras.ops` (a raw
  `tf.` op refuses a `KerasTensor`);
- where its `call` takes `training`, a trace in training and one in inference run the
  same layers in the same order, so no Python branch of `call` is fixed by the trace;
- its inputs' shapes are known past the batch (a shape read in `call` is fixed by the
  trace), and the trace computes what the block does on random inputs (in inference).

Stock Keras layers (`MultiHeadAttention`), tfseg's own, models, layers without
sublayers and blocks registered in `tfseg.memory.blocks` are never traced: each has its
own twin or rule.

`inline` makes a functional model flat: each block it calls once whose trace stands
for it is replaced by the layers and ops of the trace, recursively, so the rules see
across blocks (an activation ending one block and the conv starting the next).

Example:

>>> class Block(keras.layers.Layer):
...     def __init__(self, **kwargs):
...         super().__init__(**kwargs)
...         self.conv = keras.layers.Conv2D(4, 3, padding="same")
...         self.norm = keras.layers.BatchNormalization()
...     def call(self, x):
...         return keras.ops.relu(self.norm(self.conv(x)))
>>> inputs = keras.Input((9, 9, 4))
>>> model = keras.Model(inputs, Block()(inputs))
>>> traced, why = trace(model.layers[1], keras_graph.call_nodes(model.layers[1])[0])
>>> [type(layer).__name__ for layer in traced.layers]
['InputLayer', 'Conv2D', 'BatchNormalization']
"""

import inspect
import weakref

import keras
import numpy as np

from tfseg import keras_graph
from tfseg.memory import blocks
from tfseg.memory.graph import Graph

# layer -> {(input shapes, arguments): (the trace or None, why not or None)}
_TRACES = weakref.WeakKeyDictionary()
# model -> (its flat model, the names of the layers taken apart, {name: why not})
_INLINED = weakref.WeakKeyDictionary()


def traceable(layer):
    """Whether `layer` is a subclassed block a trace may take apart: a layer of another
    library than Keras and tfseg, not a model, with sublayers, and no registered entry in
    `tfseg.memory.blocks` (which rebuilds such blocks with its twins)."""
    module = type(layer).__module__
    return (isinstance(layer, keras.layers.Layer) and not isinstance(layer, keras.Model)
            and not module.startswith(("keras.", "tfseg."))
            and bool(keras_graph.sublayers(layer))
            and not blocks.registered(layer))


def _signature(model):
    """What a trace runs, in order: each node's operation (a layer by identity, an op
    by its class)."""
    return [id(node.operation) if isinstance(node.operation, keras.layers.Layer)
            else type(node.operation)
            for node in keras_graph.nodes_in_order(model)]


def _traced(layer, node, **override):
    inputs = [keras.Input(batch_shape=t.shape, dtype=t.dtype) for t in node.input_tensors]
    args, kwargs = node.arguments.fill_in(dict(zip(map(id, node.input_tensors), inputs)))
    outputs = layer.call(*args, **{**kwargs, **override})
    return _replayed(keras.Model(inputs if len(inputs) > 1 else inputs[0], outputs,
                                 name=layer.name))


def _replayed(model):
    """`model` recorded again without the `training=None` its block's call passed on:
    a functional model passes each layer the training in force itself, and Keras'
    shape inference hands a recorded argument to `compute_output_spec`, which some
    layers do not take (keras-hub's HGNetV2 calls `Identity(x, training=training)`)."""
    def call(node, tensors):
        args, kwargs = node.arguments.fill_in(tensors)
        if "training" in kwargs and kwargs["training"] is None:
            del kwargs["training"]
        return keras.tree.flatten(node.operation(*args, **kwargs))

    return _remade(model, call, named=False)


def _remade(model, call, named=True):
    """`model` made again on new inputs (with its inputs' names where `named`), each of
    its nodes by `call(node, tensors)` -> the node's outputs, flat; `tensors` maps the
    id of each earlier symbolic tensor to its new one. Its inputs keep `model`'s
    structure (one tensor, a list, a dict), so it is called as `model` is."""
    inputs = [keras.Input(batch_shape=t.shape, dtype=t.dtype, name=t.name if named else None)
              for t in model.inputs]
    tensors = dict(zip(map(id, model.inputs), inputs))
    for node in Graph(model).nodes:
        tensors.update(zip(map(id, node.outputs), call(node, tensors)))
    outputs = keras.tree.map_structure(lambda t: tensors[id(t)], model.output)
    structure = keras.tree.map_structure(lambda t: tensors[id(t)],
                                         keras_graph.input_structure(model))
    return keras.Model(structure, outputs, name=model.name)


def _takes_training(layer):
    try:
        return "training" in inspect.signature(layer.call).parameters
    except (TypeError, ValueError):
        return True  # not known: checked as if it did


def _agrees(layer, model, node):
    """Whether `model` computes what `layer` does where `node` calls it, on random
    inputs at the node's shapes (batch 1 where it is open), in inference."""
    rng = np.random.default_rng(0)
    shapes = {id(t): [d or 1 for d in t.shape] for t in node.input_tensors}
    data = {id(t): (rng.uniform(-1, 1, shapes[id(t)]).astype(t.dtype)
                    if np.issubdtype(np.dtype(t.dtype), np.floating)
                    else np.zeros(shapes[id(t)], t.dtype))
            for t in node.input_tensors}
    args, kwargs = node.arguments.fill_in(data)
    if _takes_training(layer):
        kwargs = {**kwargs, "training": False}
    inputs = [data[id(t)] for t in node.input_tensors]
    got, expected = ([keras.ops.convert_to_numpy(t) for t in keras.tree.flatten(out)]
                     for out in (model(inputs if len(inputs) > 1 else inputs[0], training=False),
                                 layer(*args, **kwargs)))
    return len(got) == len(expected) and all(
        a.shape == b.shape and np.allclose(a, b, rtol=1e-4, atol=1e-5 * (1 + np.abs(b).max()))
        for a, b in zip(got, expected))


def _trace(layer, node):
    if any(None in tuple(t.shape)[1:] for t in node.input_tensors):
        return None, "its input's shape is open past the batch, and a trace holds for one shape"
    try:
        model = _traced(layer, node)
        branches = ([_traced(layer, node, training=flag) for flag in (True, False)]
                    if _takes_training(layer) else [])
    except Exception as error:  # a call that does not run on symbolic tensors: keep it
        return None, f"its call does not trace ({type(error).__name__}: {_first(error)})"
    if len(branches) == 2 and _signature(branches[0]) != _signature(branches[1]):
        return None, "its call runs other layers in training than in inference"
    own = {id(v) for v in layer.variables}
    if own != {id(v) for v in model.variables} or len(layer.variables) != len(model.variables):
        return None, "its call reads variables that are not its sublayers'"
    try:
        agrees = _agrees(layer, model, node)
    except Exception:  # a trace that fixed a shape the call reads at run time
        agrees = False
    if not agrees:
        return None, "its trace does not compute what its call does"
    return model, None


def _first(error):
    """The first sentence of `error`'s message, for a one-line summary (a raw `tf.` op's
    error goes on for a page about `KerasTensor`s)."""
    line = (str(error).strip().splitlines() or [""])[0]
    sentence = line.split(". ")[0]
    return sentence if len(sentence) <= 160 else sentence[:157] + "..."


def trace(layer, node):
    """(a functional model of `layer`'s sublayers computing what `layer` computes where
    `node`, a node of `tfseg.memory.graph.Graph`, calls it, None), or (None, why not).
    The model takes the node's input tensors (a list where there are several) with the
    node's other arguments fixed. Made once per layer and input shapes."""
    key = (tuple((tuple(t.shape), t.dtype) for t in node.input_tensors),
           repr(node.arguments.kwargs))
    known = _TRACES.setdefault(layer, {})
    if key not in known:
        known[key] = _trace(layer, node)
    return known[key]


def inline(model):
    """(a functional `model` flat, [the names of the blocks taken apart], {the name of a
    block kept whole: why}): each block (`traceable`) it calls once whose trace stands
    for it (`trace`) is replaced by the trace's layers and ops, called on the same
    tensors, and so on inside; where a name of those is taken in `model` already (two
    blocks' "dropout"), by the trace as a nested model instead, which the rewrite takes
    apart as it does a backbone. The same layer objects: the same variables and paths.
    `model` itself, never called again, where no block is taken apart. Made once per
    model (and its flat model is its own).

    Example:

    >>> flat, taken, kept = inline(model)  # the model in this module's example
    >>> taken, [type(layer).__name__ for layer in flat.layers]
    (['block'], ['InputLayer', 'Conv2D', 'BatchNormalization'])
    """
    if model not in _INLINED:
        graph = Graph(model)
        names = {node.operation.name for node in graph.nodes}
        bodies = [(node, *_body(graph, node, names)) for node in graph.nodes]
        taken = [name for _, _, _, inner, _ in bodies for name in inner]
        kept = {name: why for *_, whys in bodies for name, why in whys.items()}
        flat = _flat(model, bodies) if taken else model
        _INLINED[model] = _INLINED[flat] = (flat, taken, kept)
    return _INLINED[model]


def _flat(model, bodies):
    """`model` with each node's body (from `_body`) in its place: inlined or nested."""
    graph, found = Graph(model), {id(node): (body, nest) for node, body, nest, _, _ in bodies}

    def call(node, tensors):
        body, nest = found[id(node)]
        if body is None:
            graph.run([node], tensors)
            return [tensors[id(t)] for t in node.outputs]
        parts = [tensors[id(t)] for t in node.input_tensors]
        if nest:
            return keras.tree.flatten(body(parts if len(parts) > 1 else parts[0]))
        inside, known = Graph(body), dict(zip(map(id, body.inputs), parts))
        return [inside.run(inside.nodes, known)[id(t)] for t in body.outputs]

    return _remade(model, call)


def _body(graph, node, names):
    """(the flat trace standing for `node`'s block, whether it goes in nested, [the names
    of the blocks it takes apart], {the name of a block kept whole: why}); (None, False,
    [], {}) where `node`'s layer is no block to trace. `names`: the names already in the
    flat model, which an inlined trace's layers join."""
    layer = node.operation
    if not traceable(layer) or graph.shared(layer):
        return None, False, [], {}
    body, why = trace(layer, node)
    if body is None:
        return None, False, [], {layer.name: why}
    body, taken, kept = inline(body)
    inner = {n.operation.name for n in Graph(body).nodes}
    nest = bool(inner & (names - {layer.name}))
    if not nest:
        names |= inner
    return body, nest, [layer.name] + taken, kept
