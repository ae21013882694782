"""Copies of a layer that share its variables: the rewrite's way into a subclassed block
whose config does not rebuild it and whose call does not trace (keras-hub's SAM
encoder, whose relative positions are made in a constructor, and Swin's blocks, whose
windows divide the batch in Python).

`shared_copy(layer, targets)` copies `layer` and, under it, each sublayer in `targets`
and the sublayers on the way to them, and nothing else: every other sublayer, and every
variable, random state and setting, is the original's own object, so the copy computes
what the original does with the same variables at the same paths. A copied sublayer may
then take a twin's class (the twins add no state), and its original is untouched.

A copy is the object's attributes, not its config: Keras keeps a layer's sublayers in
`_layers` and the graph nodes that call it in `_inbound_nodes` and `_outbound_nodes`,
which a copy gets afresh; those names are read here only.

Example:

>>> block = keras.Sequential([keras.layers.Dense(4), keras.layers.LayerNormalization()])
>>> copy = shared_copy(block, {id(block.layers[1])})
>>> copy.layers[0] is block.layers[0], copy.layers[1] is block.layers[1]
(True, False)
>>> copy.layers[1].gamma is block.layers[1].gamma
True
"""

import keras

from tfseg import keras_graph


def shared_copy(layer, targets, _made=None):
    """A copy of `layer` whose sublayers with ids in `targets`, and those on the way to
    them, are copies too; `layer` itself where none is under it (and it is none). A
    sublayer reached twice (held by a block and by the `Sequential` in it) is copied once."""
    made = {} if _made is None else _made
    if id(layer) in made:
        return made[id(layer)]
    copies = {}
    for sub in keras_graph.direct_sublayers(layer):
        copied = shared_copy(sub, targets, made)
        if copied is not sub:
            copies[id(sub)] = copied
    if not copies and id(layer) not in targets:
        made[id(layer)] = layer
        return layer
    copy = object.__new__(type(layer))
    made[id(layer)] = copy
    copy.__dict__.update(layer.__dict__)  # not setattr: Keras would track them again
    for name, value in layer.__dict__.items():
        if isinstance(value, keras.layers.Layer) and id(value) in copies:
            copy.__dict__[name] = copies[id(value)]
        elif isinstance(value, (list, tuple)) and any(id(v) in copies for v in value):
            copy.__dict__[name] = _swapped(value, copies)
    keras_graph.set_direct_sublayers(
        copy, [copies.get(id(sub), sub) for sub in keras_graph.direct_sublayers(layer)])
    keras_graph.forget_calls(copy)
    return copy


def _swapped(values, copies):
    """`values` (a list or tuple of sublayers) with each copied one swapped in, as the
    same kind of sequence where it takes one."""
    swapped = [copies.get(id(v), v) for v in values]
    try:
        return type(values)(swapped)
    except TypeError:  # a tracked list that needs its tracker: a plain list reads the same
        return swapped
