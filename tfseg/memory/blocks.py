"""What the rewrite knows of other libraries' subclassed blocks: the pairs inside that
fuse, the twins of blocks that compute in their `call`, and how to rebuild a block whose
config does not.

The rewrite sees a subclassed layer as one node and cannot read its `call`, so it cannot
prove that a Dense layer's activation flows only into the next Dense layer (a
transformer MLP's GELU, 4x the model width, which stock keeps twice). Where a block's
`call` is known, a registered function says which pairs in it fuse: for each, the first
Dense gives up its activation and the second takes it in (`ActivationDense`), in a copy
rebuilt by `tfseg.memory.inside`. Where a block computes in its own `call` what a twin
must take over (a GELU called as `ops.nn.gelu`, attention written out), a registered
twin class, a subclass adding no state, replaces it there (`register_twin`); where a
block's config does not rebuild it (keras-hub's MiT blocks), a registered function
makes the copy (`register_rebuild`).

This module is the registry alone: it imports no library's entries. Those live in
their own module (`tfseg/memory/hub_blocks.py` for keras-hub), which registers itself
here once that library is imported (`tfseg/memory/__init__.py`'s post-import hook): a
model made of its layers has imported it, and tfseg never needs it otherwise. A version
of the library whose classes moved registers nothing there (and the log says so): its
blocks stay stock.

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

from tfseg.memory.options import RewriteOptions

# block class -> function(built block) -> ([(first Dense's attribute, second's)], why
# none fuse or None)
_REGISTRY = {}
# block class -> (the `RewriteOptions` field that turns it on, function(built
# block) -> (twin class or None, {attribute: (its twin class, ((attribute, value), ...))},
# why there is no twin or None))
_TWINS = {}
# block class -> function(built block) -> an unbuilt copy with the same sublayers
_REBUILDS = {}


def register_block(cls):
    """Registers the decorated function as what fuses inside blocks of class `cls`: it
    takes a built block and returns ([(attribute of the first Dense, of the second)], a
    reason where none fuse or None); an attribute is a name, or a tuple of names for a
    Dense inside a sublayer (("mlp", "dense")). List a pair only where the block's `call` passes the
    first's output to the second alone, through nothing that is not the identity."""
    def decorator(function):
        if cls is not None:  # None: a class the installed library does not have
            _REGISTRY[cls] = function
        return function
    return decorator


def register_twin(cls, option):
    """Registers the decorated function as the twin of blocks of class `cls`, used where
    the rewrite's `option` (a `RewriteOptions` field name: "fuse_relu_conv",
    "lean_attention"; another name is a ValueError) is on: it takes a built block and
    returns (the twin class, or None; {attribute of a sublayer: (the class that sublayer
    takes, its (attribute, value) settings)}; why there is no twin, or None). The twin
    class subclasses `cls` and adds no state."""
    RewriteOptions().on(option)  # an unknown name: a ValueError now, not a silent no-op

    def decorator(function):
        if cls is not None:
            _TWINS[cls] = (option, function)
        return function
    return decorator


def register_rebuild(cls):
    """Registers the decorated function as how to copy a block of class `cls` whose
    config does not rebuild it: it takes the built block and returns an unbuilt one
    with the same sublayers, names and settings."""
    def decorator(function):
        if cls is not None:
            _REBUILDS[cls] = function
        return function
    return decorator


def twin(layer, options):
    """(twin class or None, {attribute: (class, settings)}, why or None) for `layer`, a
    block of a registered class whose option is on in `options` (a
    `tfseg.memory.RewriteOptions`); (None, {}, None) else."""
    option, function = _TWINS.get(type(layer), (None, None))
    return (None, {}, None) if option is None or not options.on(option) else function(layer)


def rebuild(layer):
    """An unbuilt copy of `layer` from its registered function; None if none is."""
    function = _REBUILDS.get(type(layer))
    return None if function is None else function(layer)


def fusions(layer):
    """([(first Dense's attribute, second's)], why none fuse or None) for `layer`, a block
    of a registered class; ([], None) for any other layer."""
    function = _REGISTRY.get(type(layer))
    return ([], None) if function is None else function(layer)


def registered(layer):
    """Whether `layer`'s class has an entry here (its pairs, twin or rebuild)."""
    return any(type(layer) in table for table in (_REGISTRY, _TWINS, _REBUILDS))
