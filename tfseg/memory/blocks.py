"""What the rewrite knows of other libraries' subclassed blocks: the pairs inside that fuse.

The rewrite sees a subclassed layer as one node and cannot read its `call`, so it cannot
prove that a Dense layer's activation flows only into the next Dense layer (a
transformer MLP's GELU, 4x the model width, which stock keeps twice). Where a block's
`call` is known, a registered function says which pairs in it fuse: for each, the first
Dense gives up its activation and the second takes it in (`ActivationDense`), in a copy
rebuilt by `tfseg.memory.inside`.

A library's entries live in their own module (`tfseg/memory/hub_blocks.py` for
keras-hub), imported only once that library is: a model made of its layers has imported
it, and tfseg never needs it otherwise. A version of the library whose classes moved
registers nothing there (and the log says so): its blocks stay stock.

Example:

>>> import keras
>>> class Mlp(keras.layers.Layer):  # call: self.fc2(self.fc1(x))
...     pass
>>> @register_block(Mlp)
... def _mlp(layer):
...     return [("fc1", "fc2")], None
>>> fusions(Mlp())
([('fc1', 'fc2')], None)
"""

import sys

# block class -> function(built block) -> ([(first Dense's attribute, second's)], why
# none fuse or None)
_REGISTRY = {}


def register_block(cls):
    """Registers the decorated function as what fuses inside blocks of class `cls`: it
    takes a built block and returns ([(attribute of the first Dense, of the second)], a
    reason where none fuse or None). List a pair only where the block's `call` passes the
    first's output to the second alone, through nothing that is not the identity."""
    def decorator(function):
        if cls is not None:  # None: a class the installed library does not have
            _REGISTRY[cls] = function
        return function
    return decorator


def fusions(layer):
    """([(first Dense's attribute, second's)], why none fuse or None) for `layer`, a block
    of a registered class; ([], None) for any other layer."""
    if "keras_hub" in sys.modules:
        from tfseg.memory import hub_blocks  # noqa: F401  (registers keras-hub's blocks)
    function = _REGISTRY.get(type(layer))
    return ([], None) if function is None else function(layer)
