"""Rewrite any functional Keras model to use the memory-saving twins, keeping its weights."""

import collections
import logging

import keras

from tfseg.layers import Recompute, ResizedConcatConv2D, SerialBranches
from tfseg.memory.inside import rebuilt_with_twins, same_names, same_scope, seed_states
from tfseg.memory.options import of
from tfseg.memory.patterns import Graph, changes

log = logging.getLogger("tfseg.memory")


def is_functional(model):
    """A model built from a graph of layers (the functional API, or a subclass built
    that way, as keras-hub's backbones are), which `rewrite` can take apart."""
    return isinstance(model, keras.Model) and hasattr(model, "_nodes_by_depth")


def as_functional(model):
    """`model` as a functional model of the same layers, or None where it has no graph.

    A built `keras.Sequential` (ConvNeXt's stem and downsampling blocks) is a chain
    of layers over symbolic inputs, so a functional model over the same nodes
    computes the same thing and can be rewritten.
    """
    if is_functional(model):
        return model
    if isinstance(model, keras.Sequential) and getattr(model, "_functional", None) is not None:
        return keras.Model(model.inputs, model.outputs, name=model.name)
    return None


def rewrite(model, options=None, *, recompute=None, recompute_layer=Recompute):
    """Returns a functional model with the memory-saving twins, the same weights and
    the same variable paths.

    Args:
      model: a functional `keras.Model`.
      options: the `RewriteOptions` saying which tricks apply (each is documented
        there); None: `RewriteOptions()`, every one. `RewriteOptions.none()` changes
        nothing but the `recompute` segments.
      recompute: a sequence of `Segment`s to wrap in `Recompute` (in
        `SerialBranches`: those with `branches=True`). Inside them the other
        rewrites apply too, separable fusion included.
      recompute_layer: the layer class that wraps each segment, called as
        `recompute_layer(block, name=...)` (default `Recompute`); another is for
        comparisons, e.g. `tfseg.profile.anchors.RecomputeGrad` (tf.recompute_grad).

    A model nested inside (a backbone inside a task model, a `Sequential` block:
    `as_functional`) is rewritten the same way, with the same options (`recompute`
    names the outer model's layers only). Every other layer, and every operation
    that is not a layer (`x + y`), is the original's own: the rewritten model
    shares it and its variables with `model`, so train one of the two, not both.
    A twin is a new layer built from its original's config, holding a copy of its
    weights under the same paths. What was rewritten is logged on the
    "tfseg.memory" logger; `changes()` returns it without building.

    Example:

    >>> stock = keras.applications.MobileNetV2(weights=None, input_shape=(64, 64, 3))
    >>> saving = rewrite(stock)
    >>> unfused = rewrite(stock, RewriteOptions(fuse_separable=False))
    >>> sorted(w.path for w in saving.weights) == sorted(w.path for w in stock.weights)
    True
    """
    options = of(options)
    graph = Graph(model)
    summary = changes(model, options, recompute)
    folded = {id(norm) for norm, _ in summary.folds.values()}
    multiplies = {id(multiply) for multiply, _, _ in summary.scaled.values()}
    new_layers, rebuilt = {}, []
    opaque = [n.operation.name for n in graph.nodes
              if isinstance(n.operation, keras.Model) and as_functional(n.operation) is None]
    if opaque:
        log.warning("%s: nested models without a graph of layers are kept as they are, "
                    "not rewritten: %s", model.name, opaque)

    def twin(layer):
        if layer not in new_layers:
            nested = as_functional(layer) if isinstance(layer, keras.Model) else None
            if nested is not None:  # a backbone inside a task model: rewritten too
                if layer.name in summary.trimmed:  # its upsampling goes to the conv after
                    end = summary.trimmed[layer.name].input_tensors[0]
                    nested = keras.Model(nested.inputs, end, name=nested.name)
                if layer.name in summary.headless:  # its first conv takes in the concat
                    outputs = nested.outputs[0] if len(nested.outputs) == 1 else nested.outputs
                    nested = keras.Model(summary.headless[layer.name].output, outputs,
                                         name=nested.name)
                new_layers[layer] = rewrite(nested, options, recompute_layer=recompute_layer)
            elif isinstance(layer, keras.layers.Layer) and layer.name in summary.replacements:
                cls, extra = summary.replacements[layer.name]
                new_layers[layer] = same_scope(cls.from_config({**layer.get_config(), **extra}),
                                                layer)
                rebuilt.append(layer)  # its weights are copied once it is built
            else:
                # Kept: the layer itself, so no config needs to round-trip (keras-hub's
                # often do not) and its variables keep their paths. An operation that
                # is not a layer (`x + y` in a functional graph) has nothing to keep.
                new_layers[layer] = layer
        return new_layers[layer]

    def block(name, inside, start, tail, end):
        block_input = keras.Input(batch_shape=start.shape, dtype=start.dtype)
        nodes = [n for n in graph.nodes if id(n) in inside]
        inner = summary.inner.get(name, {})  # its fused separable convs
        if name in summary.serial:
            return SerialBranches([
                keras.Model(block_input, run([n for n in nodes if id(n) in branch],
                                             {id(start): block_input}, inner)[id(t)],
                            name=f"{name}_branch{i}")
                for i, (branch, t) in enumerate(zip(summary.serial[name], end.input_tensors))
            ], axis=end.operation.axis, name=name)
        last = nodes[-1] if tail is not None else end
        out = run(nodes, {id(start): block_input}, inner)[id(last.outputs[0])]
        tail = None if tail is None else twin(tail.operation)
        block = keras.Model(block_input, out, name=f"{name}_block")
        if tail is None:  # a segment
            return recompute_layer(block, name=name)
        return Recompute(block, tail=tail, name=name)

    def run(nodes, tensors, blocks):
        """Builds `nodes` from `tensors`; `blocks` (as `Changes.blocks`) are made whole."""
        inside_blocks = set().union(*(b[1] for b in blocks.values()))
        for node in nodes:
            if id(node) in blocks:
                name, inside, start, tail = blocks[id(node)]
                layer = block(name, inside, start, tail, node)
                tensors[id(node.outputs[0])] = layer(tensors[id(start)])
                continue
            if id(node) in inside_blocks:
                continue  # built inside its block
            if id(node) in summary.concats:  # the nested model's first conv, taking it in
                conv, sizes = summary.concats[id(node)]
                if conv not in new_layers:
                    new_layers[conv] = same_scope(ResizedConcatConv2D.from_config(
                        {**conv.get_config(), "input_sizes": sizes}), conv)
                    rebuilt.append(conv)
                tensors[id(node.outputs[0])] = new_layers[conv](
                    [tensors[id(t)] for t in node.input_tensors])
                continue
            if id(node) in summary.skipped:
                tensors[id(node.outputs[0])] = tensors[id(node.input_tensors[0])]
                continue
            if id(node) in folded or id(node) in multiplies:
                continue  # made with its residual at the Add, or in the conv it feeds
            if id(node) in summary.scaled:
                _, full, scale = summary.scaled[id(node)]
                tensors[id(node.outputs[0])] = twin(node.operation)(
                    tensors[id(full)], scale=tensors[id(scale)])
                continue
            if id(node) in summary.folds:
                norm, other = summary.folds[id(node)]
                args, kwargs = norm.arguments.fill_in(tensors)
                extra = {"residual_relu": True} if id(node) in summary.relu_residuals else {}
                tensors[id(node.outputs[0])] = twin(norm.operation)(
                    *args, residual=tensors[id(other)], **extra, **kwargs)
                continue
            args, kwargs = node.arguments.fill_in(tensors)
            layer = node.operation
            if layer not in new_layers and layer.name in summary.inside:
                copy, outputs = rebuilt_with_twins(layer, summary.inside[layer.name], args,
                                                   kwargs)
                if copy is not None:
                    new_layers[layer] = copy
                    tensors.update(zip(map(id, node.outputs), keras.tree.flatten(outputs)))
                    continue
            outputs = twin(layer)(*args, **kwargs)
            for old, new in zip(node.outputs, keras.tree.flatten(outputs)):
                tensors[id(old)] = new
        return tensors

    inputs = [keras.Input(batch_shape=t.shape, dtype=t.dtype, name=t.name) for t in model.inputs]
    tensors = run(graph.nodes, {id(old): new for old, new in zip(model.inputs, inputs)},
                  summary.blocks)
    outputs = keras.tree.map_structure(lambda t: tensors[id(t)], model._outputs_struct)
    new_model = keras.Model(inputs, outputs, name=model.name)
    for old in rebuilt:
        new_layers[old].set_weights(old.get_weights())
        same_names(new_layers[old], old)  # sublayers made in build(): MHA's
        for source, target in zip(seed_states(old), seed_states(new_layers[old])):
            target.assign(source)  # its dropout draws what the original's would
    twice = _shared_paths(new_model) - _shared_paths(model)
    if twice:  # a layer called both here and in a model nested here: two twins
        raise ValueError(f"{model.name}: the rewrite gave two variables the path "
                         f"{sorted(twice)[0]!r}; a layer called in a model and in one nested "
                         f"in it is not supported")
    log.info("rewrote %s: %s", model.name, summary)
    return new_model


def _shared_paths(model):
    counts = collections.Counter(w.path for w in model.weights)
    return {path for path, n in counts.items() if n > 1}
