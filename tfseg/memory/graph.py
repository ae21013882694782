"""A functional Keras model as the memory rewrite reads it: its nodes in topological
order and who uses what (`Graph`), and which models have such a graph (`as_functional`)."""

import collections

import keras

from tfseg import keras_graph
from tfseg.memory.segments import producer


def is_functional(model):
    """A model built from a graph of layers (the functional API, or a subclass built
    that way, as keras-hub's backbones are), which `rewrite` can take apart."""
    return isinstance(model, keras.Model) and keras_graph.has_graph(model)


def as_functional(model):
    """`model` as a functional model of the same layers, or None where it has no graph.

    A built `keras.Sequential` (ConvNeXt's stem and downsampling blocks) is a chain
    of layers over symbolic inputs, so a functional model over the same nodes
    computes the same thing and can be rewritten; it takes and gives one tensor, as the
    `Sequential` does.
    """
    if is_functional(model):
        return model
    if isinstance(model, keras.Sequential) and keras_graph.sequential_graph(model) is not None:
        return keras.Model(keras_graph.input_structure(model),
                           keras_graph.output_structure(model), name=model.name)
    return None


def nested_model(layer):
    """`layer` as a functional model the rewrite takes apart (a backbone nested in a task
    model, a built `Sequential`), or None for any other layer."""
    return as_functional(layer) if isinstance(layer, keras.Model) else None


def _refusal(model):
    """The error for a `model` without a graph of layers: what it is, and the way on."""
    if not isinstance(model, keras.Model):
        return TypeError(f"the memory rewrite takes a keras.Model, got {type(model).__name__}"
                         + ("" if not isinstance(model, keras.layers.Layer) else
                            f" {model.name}: call it on a keras.Input inside a model"))
    if isinstance(model, keras.Sequential):
        return ValueError(f"{model.name}: a Sequential without an input has no graph of layers "
                          f"yet; start it with keras.Input(shape) or build it, then rewrite")
    return ValueError(f"{model.name}: a subclassed model has no graph of layers to rewrite; "
                      f"build it with the functional API (a built Sequential: "
                      f"tfseg.memory.as_functional), or register its blocks' twins "
                      f"(tfseg.memory.blocks)")


class Graph:
    """The nodes of a functional model in topological order, and who uses what."""

    def __init__(self, model):
        if not keras_graph.has_graph(model):
            raise _refusal(model)
        self.model = model
        self.nodes = [node for node in keras_graph.nodes_in_order(model)
                      if node.operation is not None]
        self.consumers = collections.defaultdict(list)
        for node in self.nodes:
            for tensor in node.input_tensors:
                self.consumers[id(tensor)].append(node)
        self.outputs = {id(t) for t in model.outputs}
        # Counted in this graph: a layer a rewrite kept is also called in the new model.
        self._uses = collections.Counter(id(node.operation) for node in self.nodes)

    def shared(self, layer):
        """Whether this graph calls `layer` more than once (a twin would run in two places)."""
        return self._uses[id(layer)] != 1

    def node_of(self, name):
        """This graph's node of the layer called `name`, called once."""
        nodes = [node for node in self.nodes if node.operation.name == name]
        if len(nodes) != 1:
            raise ValueError(f"{self.model.name}: no layer {name!r} called once")
        return nodes[0]

    def run(self, nodes, tensors, training=None):
        """Calls the layers of `nodes` (this graph's, in its order) as the model's own
        call would: each on the tensors `tensors` holds for its inputs (keyed by the id
        of the symbolic tensor), with `training` where its call takes it; adds their
        outputs to `tensors` and returns it."""
        for node in nodes:
            args, kwargs = node.arguments.fill_in(tensors)
            layer = node.operation
            if training is not None and "training" in getattr(layer, "_call_context_args", ()):
                kwargs["training"] = training
            outputs = keras.tree.flatten(layer(*args, **kwargs))
            tensors.update((id(x), y) for x, y in zip(node.outputs, outputs))
        return tensors

    def only_consumer(self, node):
        """The single node that uses `node`'s single output, else None."""
        if len(node.outputs) != 1 or id(node.outputs[0]) in self.outputs:
            return None
        users = self.consumers[id(node.outputs[0])]
        return users[0] if len(users) == 1 else None

    def sole_feeder(self, node):
        """The node that makes `node`'s single input and feeds nothing else, else None."""
        if len(node.input_tensors) != 1:
            return None
        parent = producer(node.input_tensors[0])
        if parent.is_input or self.only_consumer(parent) is not node:
            return None
        return parent
