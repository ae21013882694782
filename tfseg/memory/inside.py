"""Twins inside layers the graph rewrite cannot take apart: subclassed blocks.

keras-hub builds its transformer blocks as subclassed layers (`ViTEncoder` holds
`ViTEncoderBlock`s of stock `LayerNormalization`, `MultiHeadAttention` and
`Dense` layers). The functional rewrite sees each as one opaque node. Where such
a layer's config rebuilds it with the same variables (the same paths and shapes),
the rewrite uses a rebuilt copy whose stock norms and attention layers are their
twins, and copies the weights in; the user's model is never changed. Where the
config does not (keras-hub's MiT blocks), the layer is kept as it is. A copy must
also have its original's sublayers with the same configs and `trainable` flags; a
setting the layer itself uses in `call` and leaves out of its config cannot be
seen, as for any Keras model saved and loaded.

The twins here add no state to the stock class they subclass, so a rebuilt
copy's stock sublayer becomes its twin by taking the twin's class (and, for a fused
pair, one attribute; for the batch-norm twin, its kernel form from the options): same
object, same variables, nothing to copy. A pair of Dense layers fuses
(`ActivationDense`) only in a block whose `call` tfseg knows (`tfseg.memory.blocks`).
"""

import collections
import logging
import weakref

import keras

from tfseg import keras_graph
from tfseg.layers import ActivationDense
from tfseg.layers.elementwise import ELEMENTWISE_FUNCTIONS
from tfseg.memory import blocks
from tfseg.memory.copies import shared_copy
from tfseg.memory.twins import twin_inside

log = logging.getLogger("tfseg.memory")


# layer -> {(twins, input shapes, sublayer settings): why a copy would not rebuild}
_REBUILDS = weakref.WeakKeyDictionary()

# A sublayer of a rebuilt copy (or the copy itself) that becomes a twin: its index in
# `_members(copy)`, its name, its stock class, the class it takes, and (attribute, value) pairs
# it then gets.
Inner = collections.namedtuple("Inner", "index name stock twin settings")


def _reach(block, attributes):
    """`block`'s sublayer at `attributes`: an attribute name, or a tuple of them, one per
    layer down, where an int is an index into the list before it (None where there is
    none)."""
    for name in (attributes,) if isinstance(attributes, str) else attributes:
        if isinstance(name, int):
            block = block[name] if isinstance(block, (list, tuple)) and name < len(block) else None
        else:
            block = getattr(block, name, None)
    return block


def _shown(attributes):
    return attributes if isinstance(attributes, str) else ".".join(map(str, attributes))


def _pairs(block, index_of, fuse):
    """Inner entries for the Dense pairs that fuse inside `block` (`tfseg.memory.blocks`),
    and [(block name, why)] where a registered block keeps a pair stock."""
    if not fuse:
        return [], []
    pairs, why = blocks.fusions(block)
    found, kept = [], [] if why is None else [(block.name, why)]
    for first, second in pairs:
        a, b = _reach(block, first), _reach(block, second)
        plain = all(type(d) is keras.layers.Dense and not d.lora_enabled
                    and not d.quantization_mode for d in (a, b))
        if (not plain or a.activation not in ELEMENTWISE_FUNCTIONS or id(a) not in index_of
                or id(b) not in index_of):
            kept.append((block.name, f"{_shown(first)} -> {_shown(second)} is not a stock "
                                     f"Dense pair with an elementwise activation between"))
            continue
        found += [Inner(index_of[id(a)], a.name, keras.layers.Dense, keras.layers.Dense,
                        (("activation", keras.activations.linear),)),
                  Inner(index_of[id(b)], b.name, keras.layers.Dense, ActivationDense,
                        (("input_activation", keras.activations.serialize(a.activation)),))]
    return found, kept


def _registered(sub, index, index_of, options):
    """([`Inner`], [(name, why)]) for `sub`, a block with a registered twin class
    (`tfseg.memory.blocks.twin`): the block and the sublayers that change with it."""
    cls, settings, why = blocks.twin(sub, options)
    if cls is None:
        return [], [] if why is None else [(sub.name, why)]
    found = [Inner(index, sub.name, type(sub), cls, ())]
    for attribute, (inner_cls, values) in settings.items():
        inner = _reach(sub, attribute)
        if id(inner) not in index_of:
            return [], [(sub.name, f"it has no sublayer {_shown(attribute)!r} to become "
                                   f"{inner_cls.__name__}")]
        found.append(Inner(index_of[id(inner)], inner.name, type(inner), inner_cls, values))
    return found, []


def inner_twins(layer, options):
    """([`Inner`], [(sublayer name, why it stays stock)]) for `layer`'s stock norms (with
    `options.inplace_norm`), attention layers (with `options.lean_attention`) and, in
    blocks `tfseg.memory.blocks` knows, Dense pairs (with `options.fuse_relu_conv`) and
    registered twins (with the option each is registered under), `layer` itself among
    them: what a rebuilt copy of `layer` would get. `options` is a `RewriteOptions`. Empty for a model (the rewrite
    takes those apart)."""
    if isinstance(layer, keras.Model) or not isinstance(layer, keras.layers.Layer):
        return [], []
    members = _members(layer)
    index_of = {id(sub): index for index, sub in enumerate(members)}
    found, kept = _registered(layer, 0, index_of, options)  # a registered block itself
    subs = members[1:]
    for index, sub in enumerate(subs, start=1):
        row = twin_inside(sub)  # a stock norm or attention layer (`twins.TWINS`)
        if row is not None and options.on(row.option):
            found.append(Inner(index, sub.name, type(sub), row.twin,
                               tuple(options.forms_for(row.twin).items())))
        more, why = _registered(sub, index, index_of, options)
        found, kept = found + more, kept + why
    for block in [layer] + subs:
        pairs, why = _pairs(block, index_of, options.fuse_relu_conv)
        found, kept = found + pairs, kept + why
    return found, kept


def same_scope(twin, layer):
    """Gives `twin` the name scope `layer` was first called in, so its variables get
    `layer`'s paths (a Sequential's name, NASNet's `name_scope`s, keras-hub's blocks).

    Keras 3 records that scope in `_parent_path` on a layer's first call and builds its
    variables under it; there is no public way to set it.
    """
    keras_graph.set_parent_path(twin, keras_graph.parent_path(layer))
    return twin


def _members(layer):
    """`layer` and its sublayers, in the order `Inner.index` counts them."""
    return keras_graph.sublayers(layer, include_self=True)


def _settings(layer):
    """What a sublayer computes, as far as Keras records it: class, config, trainable."""
    try:
        config = layer.get_config()
    except NotImplementedError:
        config = {}
    config.pop("name", None)
    return type(layer), repr(config), layer.trainable


def _weights(layer):
    return sorted(((w.path, tuple(w.shape), w) for w in layer.weights), key=lambda t: t[0])


def same_names(copy, layer):
    """Gives `copy`'s sublayers the names of `layer`'s, which Keras numbered when
    `layer` was made (`dense_4`), where both have the same kinds in the same order:
    before `copy` is built, their variables' paths follow; after, their dropouts'
    random states keep their keys in a checkpoint (`tfseg.runtime.state`)."""
    subs, originals = (keras_graph.sublayers(l) for l in (copy, layer))
    if [type(a) for a in subs] == [type(b) for b in originals]:
        for sub, original in zip(subs, originals):
            sub.name = original.name


def seed_states(layer):
    """The states of `layer`'s random seed generators (its Dropouts'), in build order."""
    weights = {id(w) for w in layer.weights}
    return [v for v in layer.variables if id(v) not in weights]


def _rebuilt(layer, twins, args, kwargs):
    """(a copy of `layer` called on `args`, its outputs, None), or (None, None, why not).
    The copy is rebuilt from its config; where that copy's variables or sublayers differ
    from `layer`'s, it is a copy sharing `layer`'s variables instead
    (`tfseg.memory.copies`), its sublayers in `twins` (`Inner` entries) copied too."""
    copy, outputs, why = _from_config(layer, twins, args, kwargs)
    if why is None:
        return copy, outputs, None
    members = _members(layer)
    copy = shared_copy(layer, {id(members[t.index]) for t in twins})
    copied = _members(copy)
    if any(copied[t.index] is members[t.index] or type(copied[t.index]) is not t.stock
           for t in twins):
        return None, None, f"{why}; its copy's sublayers are not the ones found"
    try:
        return copy, copy(*args, **kwargs), None
    except Exception as error:  # a copy that does not run where its original did
        first = (str(error).splitlines() or [""])[0][:160]
        return None, None, f"{why}; its copy does not run ({type(error).__name__}: {first})"


def _from_config(layer, twins, args, kwargs):
    """`_rebuilt` from `layer`'s config (or its registered rebuild), or why not."""
    try:
        copy = blocks.rebuild(layer) or type(layer).from_config(layer.get_config())
    except Exception as error:  # a config that does not rebuild: keep the layer
        first = (str(error).splitlines() or [""])[0][:160]
        return None, None, f"its config does not rebuild it ({type(error).__name__}: {first})"
    same_names(copy, layer)
    outputs = same_scope(copy, layer)(*args, **kwargs)
    if [t[:2] for t in _weights(layer)] != [t[:2] for t in _weights(copy)]:
        return None, None, "rebuilt from its config, its variables differ"
    subs, originals = (keras_graph.sublayers(l) for l in (copy, layer))
    if [_settings(a) for a in subs] != [_settings(b) for b in originals]:
        # A config that leaves out a setting of a sublayer (an epsilon, a frozen
        # norm) rebuilds another computation with the same variables.
        return None, None, "rebuilt from its config, its sublayers differ"
    members = _members(copy)
    if any(members[t.index].name != t.name or type(members[t.index]) is not t.stock
           for t in twins):
        return None, None, "its rebuilt sublayers are not the ones found"
    return copy, outputs, None


def why_not_rebuilt(layer, twins, node):
    """Why a copy of `layer` with `twins` in it would not rebuild where `node` (a node of
    `tfseg.memory.graph.Graph`) calls it, built on new inputs of the same shapes; None
    where it would. What `changes` says without building the model. Remembered for the
    layer as long as its sublayers' settings and the inputs' shapes stay (a rewrite
    finds the changes of a model and of each model nested in it more than once)."""
    key = (tuple(twins), tuple((tuple(t.shape), t.dtype) for t in node.input_tensors),
           tuple(map(_settings, keras_graph.sublayers(layer))))
    known = _REBUILDS.setdefault(layer, {})
    if key not in known:
        tensors = {id(t): keras.Input(batch_shape=t.shape, dtype=t.dtype)
                   for t in node.input_tensors}
        args, kwargs = node.arguments.fill_in(tensors)
        known[key] = _rebuilt(layer, twins, args, kwargs)[2]
    return known[key]


def rebuilt_with_twins(layer, twins, args, kwargs):
    """Calls a copy of `layer` rebuilt from its config, with `twins` (`Inner` entries
    from `inner_twins`) in it and `layer`'s weights, on `args`; returns (the copy, its
    outputs), or (None, None) where the copy's variables or sublayers differ from
    `layer`'s (then `layer` is kept, and the log says why)."""
    copy, outputs, why = _rebuilt(layer, twins, args, kwargs)
    if why is not None:
        log.info("%s: kept as it is (%s)", layer.name, why)
        return None, None
    for (_, _, source), (_, _, target) in zip(_weights(layer), _weights(copy)):
        target.assign(source)
    for source, target in zip(seed_states(layer), seed_states(copy)):
        target.assign(source)  # its dropout draws what the original's would
    members = _members(copy)
    for twin in twins:
        members[twin.index].__class__ = twin.twin
        for attribute, value in twin.settings:
            setattr(members[twin.index], attribute, value)
    return copy, outputs
