"""Builds a rewritten model from what the rules found (`tfseg.memory.patterns.changes`):
the twins, the recomputed blocks and the nested models rewritten the same way. The
weighing (`tfseg.memory.paying`) and the public `tfseg.memory.rewrite` sit above it."""

import collections
import logging

import keras

from tfseg import keras_graph
from tfseg.layers import Recompute, SerialBranches
from tfseg.memory.graph import as_functional, nested_model
from tfseg.memory.inside import same_names, same_scope, seed_states
from tfseg.memory.patterns import Graph, changes, cut, flat

log = logging.getLogger("tfseg.memory")


def build(model, options, recompute=None, recompute_layer=Recompute):
    """(the rewritten functional model, its `Changes`): `tfseg.memory.rewrite`'s model
    before its weighing. `options` is a `RewriteOptions`; the other arguments are
    `rewrite`'s.

    Example:

    >>> stock = keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3))
    >>> saving, summary = build(stock, RewriteOptions())
    >>> len(summary.inplace)
    52
    """
    original = model
    summary = changes(model, options, recompute)
    model = flat(model, options)[0]  # what the rules read
    missing = {name for name, _ in options.chunked} - _chunked(summary)
    if missing and options.fuse_separable:  # without it, nothing is chunked
        raise ValueError(f"{model.name}: RewriteOptions.chunked names {sorted(missing)}, which "
                         f"are not the depthwise convs of fused separable convs here")
    builder = _Builder(Graph(model), summary, options, recompute_layer)
    inputs = [keras.Input(batch_shape=t.shape, dtype=t.dtype, name=t.name) for t in model.inputs]
    tensors = builder.run(builder.graph.nodes, dict(zip(map(id, model.inputs), inputs)),
                          summary.blocks)
    outputs = keras.tree.map_structure(lambda t: tensors[id(t)], model.output)
    # Stock's input structure (one tensor, a list, a dict): a call as stock's matches it.
    new_model = keras.Model(keras.tree.pack_sequence_as(keras_graph.input_structure(model),
                                                        inputs), outputs, name=model.name)
    builder.copy_weights()
    _keep_outside(original, new_model)
    twice = _shared_paths(new_model) - _shared_paths(model)
    if twice:  # a layer called both here and in a model nested here: two twins
        raise ValueError(f"{model.name}: the rewrite gave two variables the path "
                         f"{sorted(twice)[0]!r}; a layer called in a model and in one nested "
                         f"in it is not supported")
    return new_model, summary


class _Builder:
    """Builds the rewritten graph of `graph` (a `graph.Graph`) from `summary` (its
    `Changes`); the builder the plans (`tfseg.memory.plans`) call back."""

    def __init__(self, graph, summary, options, recompute_layer):
        self.graph, self.summary, self.options = graph, summary, options
        self.recompute_layer = recompute_layer
        self.new_layers = {}  # original layer -> the layer the new model calls
        self.rebuilt = []  # originals whose twins get their weights once built
        opaque = [n.operation.name for n in graph.nodes
                  if isinstance(n.operation, keras.Model) and as_functional(n.operation) is None]
        if opaque:
            log.warning("%s: nested models without a graph of layers are kept as they are, "
                        "not rewritten: %s", graph.model.name, opaque)

    def twin(self, layer):
        """What the new model calls for `layer`: a nested model rewritten, a twin, or
        (kept) the layer itself, so no config needs to round-trip (keras-hub's often do
        not) and its variables keep their paths. An operation that is not a layer (`x +
        y` in a functional graph) has nothing to keep."""
        if layer not in self.new_layers:
            nested = nested_model(layer)
            if nested is not None:  # a backbone inside a task model: rewritten too
                self.new_layers[layer] = self._nested(nested)
            elif isinstance(layer, keras.layers.Layer) and layer.name in self.summary.replacements:
                cls, extra = self.summary.replacements[layer.name]
                return self.made(layer, cls, extra)
            else:
                self.new_layers[layer] = layer
        return self.new_layers[layer]

    def made(self, layer, cls, extra):
        """`layer`'s twin of class `cls`, from its config with the options' kernel forms
        it takes and `extra`, made once."""
        if layer not in self.new_layers:
            config = {**layer.get_config(), **self.options.forms_for(cls), **extra}
            self.new_layers[layer] = same_scope(cls.from_config(config), layer)
            self.rebuilt.append(layer)  # its weights are copied once it is built
        return self.new_layers[layer]

    def _nested(self, nested):
        """`nested` rewritten, cut where a rule moved its end or start to the layer after
        or before it (`Changes.cuts`)."""
        names = {layer.name for layer in keras_graph.sublayers(nested, include_self=True)}
        options = self.options.replace(chunked=tuple(
            (name, k) for name, k in self.options.chunked if name in names))
        return build(cut(nested, self.summary.cuts), options,
                     recompute_layer=self.recompute_layer)[0]

    def block(self, block, end):
        """The layer that runs `block` (a `plans.Block` ending at the node `end`)."""
        starts = [keras.Input(batch_shape=t.shape, dtype=t.dtype) for t in block.starts]
        block_input = starts if isinstance(block.start, tuple) else starts[0]
        known = dict(zip(map(id, block.starts), starts))
        nodes = [n for n in self.graph.nodes if id(n) in block.inside]
        inner = self.summary.inner.get(block.name, {})  # its fused separable convs
        if block.branches is not None:
            return SerialBranches([
                keras.Model(block_input, self.run([n for n in nodes if id(n) in branch],
                                                  dict(known), inner)[id(t)],
                            name=f"{block.name}_branch{i}")
                for i, (branch, t) in enumerate(zip(block.branches, end.input_tensors))
            ], axis=end.operation.axis, name=block.name)
        if block.tail_relu:  # Recompute applies it
            nodes = nodes[:-1]
        last = nodes[-1] if block.tail is not None else end
        out = self.run(nodes, dict(known), inner)[id(last.outputs[0])]
        model = keras.Model(block_input, out, name=f"{block.name}_block")
        if block.tail is None:  # a segment
            return self.recompute_layer(model, name=block.name)
        return Recompute(model, tail=self.twin(block.tail.operation), tail_relu=block.tail_relu,
                         chunks=block.chunks, name=block.name,
                         kernel_form=self.options.depthwise_kernel)

    def call(self, node, tensors):
        """`node`'s layer's twin called on the new tensors, as the node called it."""
        args, kwargs = node.arguments.fill_in(tensors)
        return self.twin(node.operation)(*args, **kwargs)

    def run(self, nodes, tensors, blocks):
        """Builds `nodes` from `tensors` (id(old tensor) -> new); `blocks` (id(node) ->
        `plans.Block`) are made whole and their nodes inside them."""
        inside_blocks = set().union(*(b.inside for b in blocks.values()))
        for node in nodes:
            plan = blocks.get(id(node))
            if plan is None and id(node) in inside_blocks:
                continue  # built inside its block
            plan = plan or self.summary.actions.get(id(node))
            outputs = self.call(node, tensors) if plan is None else plan.build(self, node,
                                                                               tensors)
            if outputs is not None:
                tensors.update(zip(map(id, node.outputs), keras.tree.flatten(outputs)))
        return tensors

    def copy_weights(self):
        """Gives each twin its original's weights and random states."""
        for old in self.rebuilt:
            new = self.new_layers[old]
            new.set_weights(old.get_weights())
            same_names(new, old)  # sublayers made in build(): MHA's
            for source, target in zip(seed_states(old), seed_states(new)):
                target.assign(source)  # its dropout draws what the original's would


def _keep_outside(original, new_model):
    """Gives `new_model` the layers `original` tracks and never calls, as its
    `outside_the_graph`: checkpoints are keyed by path, so the rewritten model holds every
    variable of the original's, called or not."""
    outside = _outside_the_graph(original, {w.path for w in new_model.weights})
    if outside:
        new_model.outside_the_graph = outside
        log.info("%s: kept layers tracked outside its graph (their variables): %s",
                 new_model.name, ", ".join(layer.name for layer in outside))


def _outside_the_graph(layer, present):
    """The layers under `layer` whose variables are none of the paths `present`: layers
    a model tracks as attributes and never calls (BASNet keeps its whole ResNet encoder
    and calls all of it but the stem). The outermost such layers, each once."""
    outside = []
    for sub in keras_graph.sublayers(layer, recursive=False):
        paths = {w.path for w in sub.weights}
        if paths and not paths & present:
            outside.append(sub)
        elif paths - present:
            outside += [inner for inner in _outside_the_graph(sub, present)
                        if inner not in outside]
    return outside


def _chunked(summary):
    """The names of the depthwise convs whose separable convs `summary` (a `Changes`)
    chunks, in the models nested in it too."""
    return set(summary.chunked).union(*map(_chunked, summary.nested.values()))


def _shared_paths(model):
    counts = collections.Counter(w.path for w in model.weights)
    return {path for path, n in counts.items() if n > 1}
