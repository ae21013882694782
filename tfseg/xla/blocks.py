"""A functional Keras model run block by block, each block one XLA computation.

TensorFlow's executor dispatches a training step op by op: thousands of ops, each a few
microseconds of the host's time, however small its work. `Blocks` cuts a model's layers
into blocks (a backbone unit, the ASPP, the decoder) and runs each block as a
`tf.function(jit_compile=True)`: one launch for its forward pass, and one for its
backward pass, which TensorFlow builds from the same function and compiles too. The
twins' custom gradients run inside them. A block reads its layers' variables itself
(they are its captured inputs), so nothing is copied in or out but the maps that flow
between blocks, and the batch-norm statistics it updates are written inside it.

Example:

    >>> import keras, tensorflow as tf
    >>> from tfseg.xla import Blocks
    >>> x = keras.Input((None, None, 3))
    >>> y = keras.layers.Conv2D(4, 3, name="a_conv")(x)
    >>> y = keras.layers.Conv2D(2, 1, name="b_conv")(keras.layers.ReLU(name="a_relu")(y))
    >>> model = keras.Model(x, y)
    >>> blocks = Blocks(model, lambda layer: layer.name.split("_")[0])
    >>> blocks.names
    ('a', 'b')
    >>> blocks(tf.zeros([1, 9, 9, 3])).shape
    TensorShape([1, 7, 7, 2])
"""

import collections
import contextlib
import re

import tensorflow as tf

from tfseg.layers.xla_context import compiling
from tfseg.memory.graph import Graph
from tfseg.xla.shared import (Template, captures_by_source, keras_variables, tf_variables,
                              zeros_from_shapes)
from tfseg.xla.signature import signature


class Blocks:
    """`model` (a functional Keras model of one input) as XLA-compiled blocks.

    Blocks of the same structure (the same layers' configs, names aside, the same
    wiring and variable shapes) called with inputs of the same shapes share one
    function, traced and compiled once (`tfseg.xla.shared`): the compile cost of a
    network is that of its distinct blocks.

    Args:
      model: the functional model to run.
      block_of: `block_of(layer) -> str`, the block a layer of `model` belongs to; a
        block's layers need not be adjacent, but no block may need a later block's
        output (a ValueError names it). None: each layer is a block of its own.
      jit_compile: False runs the same cut with each block a plain `tf.function`
        (the maths without XLA, for comparison).

    Calling it with a batch returns what `model(batch, training=...)` returns. Take the
    gradients inside `backward()`.
    """

    def __init__(self, model, block_of=None, jit_compile=True):
        self.model, self.graph = model, Graph(model)
        if len(model.inputs) != 1:
            raise ValueError(f"{model.name}: Blocks runs a model of one input, it has "
                             f"{len(model.inputs)}")
        groups = collections.OrderedDict()
        for node in self.graph.nodes:
            name = block_of(node.operation) if block_of else node.operation.name
            groups.setdefault(name, []).append(node)
        self.names = tuple(groups)
        self._plans = _plan(groups, model)
        self.jit_compile = jit_compile
        self._variables = [keras_variables(n.operation for n in nodes)
                           for nodes, _, _ in self._plans]
        self._keys = [signature(plan, variables)
                      for plan, variables in zip(self._plans, self._variables)]
        # (structure, training, input shapes) -> the first block called so: the template
        # of those after it. Shapes are known only at the call (a ReLU at two sizes).
        self._first = {}
        self._functions = {}  # (template, training, shapes) -> (tf.function, Template)
        self._called = []  # the Templates of the latest call, whose backward passes follow
        self._ran = {}  # block index -> the template block it ran, in the latest call
        self._graphs = set()  # the graphs the blocks' functions were traced in

    def __call__(self, inputs, training=True):
        tensors = {id(self.model.inputs[0]): inputs}
        self._called, self._ran = [], {}
        for index, (_, ins, outs) in enumerate(self._plans):
            args = [tensors[key] for key in ins]
            shapes = tuple((tuple(a.shape), a.dtype.name) for a in args)
            template = self._first.setdefault((self._keys[index], training, shapes), index)
            self._ran[index] = template
            function, reader = self._function(template, training, shapes)
            self._called.append(reader)
            results = function(*args, *tf_variables(self._variables[index]))
            tensors.update(zip(outs, results))
        outputs = [tensors[id(t)] for t in self.model.outputs]
        return outputs[0] if len(outputs) == 1 else outputs

    @contextlib.contextmanager
    def backward(self):
        """Enter it around `tape.gradient` of the latest call (a non-persistent tape, as
        the training step's): TensorFlow builds the blocks' backward passes then, and the
        twins' custom gradients inside read the calling block's variables
        (`tfseg.xla.shared`), in XLA's form of their ops (`compiling`)."""
        with contextlib.ExitStack() as stack:
            stack.enter_context(compiling(self.jit_compile))
            stack.enter_context(zeros_from_shapes())
            stack.enter_context(captures_by_source(self._graphs))
            for reader in dict.fromkeys(self._called):
                stack.enter_context(reader.backward())
            yield

    def shared(self):
        """{block name: the name of the block whose function it ran}, for the blocks of
        the latest call that ran another's."""
        return {self.names[i]: self.names[t] for i, t in self._ran.items() if i != t}

    def functions(self):
        """{template block name: its tf.function} of the functions made so far
        (`experimental_get_tracing_count()` says how often each was traced)."""
        return {self.names[index]: fn for (index, _, _), (fn, _) in self._functions.items()}

    def _function(self, index, training, shapes):
        key = (index, training, shapes)
        if key not in self._functions:
            nodes, ins, outs = self._plans[index]
            reader = Template(self._variables[index])
            graph, count = self.graph, len(ins)

            def block(*args):
                self._graphs.add(tf.compat.v1.get_default_graph())
                with reader.reading(args[count:]):
                    tensors = graph.run(nodes, dict(zip(ins, args[:count])), training)
                return [tensors[key] for key in outs]

            # The function's name is the block's: it names the launch in a profile.
            block.__name__ = "block_" + re.sub(r"\W", "_", self.names[index])
            self._functions[key] = (tf.function(block, jit_compile=self.jit_compile,
                                                autograph=False, reduce_retracing=False),
                                    reader)
        return self._functions[key]


def _plan(groups, model):
    """[(nodes, ids of the tensors each block takes in, ids of those it gives out)] in
    the order the blocks run; a ValueError names a block that needs a later one."""
    made = {}
    for name, nodes in groups.items():
        for node in nodes:
            made.update((id(t), name) for t in node.outputs)
    done, plans = {id(t) for t in model.inputs}, []
    used_after = collections.defaultdict(set)
    for name, nodes in groups.items():
        for node in nodes:
            for tensor in node.input_tensors:
                if made.get(id(tensor)) != name:
                    used_after[id(tensor)].add(name)
    outputs = {id(t) for t in model.outputs}
    for name, nodes in groups.items():
        ins = list(dict.fromkeys(id(t) for node in nodes for t in node.input_tensors
                                 if made.get(id(t)) != name))
        missing = [key for key in ins if key not in done]
        if missing:
            raise ValueError(f"{model.name}: block {name!r} takes a tensor of block "
                             f"{made.get(missing[0])!r}, which runs after it: put their "
                             f"layers in one block")
        outs = [id(t) for node in nodes for t in node.outputs
                if id(t) in outputs or used_after[id(t)]]
        done.update(outs)
        plans.append((nodes, ins, outs))
    return plans
