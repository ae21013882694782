"""A traced training step as data: which ops run, which buffer each tensor lives
in and how big it is, and (for the simulation) each op's dependencies, buffers,
kind and rough duration."""

import collections

from tfseg.memory.kept import ALIASING_OPS, live_ops, nbytes, owner

# Outputs that are not new buffers of the step: weights, constants, arguments.
_NOT_ALLOCATED = {"Const", "ReadVariableOp", "Placeholder", "VarHandleOp", "_Arg"}
# Kernels that TF's executor runs inline ("inexpensive").
_CHEAP = ALIASING_OPS | {"Const", "Shape", "ShapeN", "Size", "Rank", "NoOp", "Placeholder",
                         "ReadVariableOp"}
# Kernels that write into a dying input of their size (forward_input_or_allocate_output).
_FORWARDING = {"Relu", "ReluGrad", "Relu6", "Relu6Grad", "LeakyRelu", "LeakyReluGrad", "Mul", "Sub",
               "AddV2", "Add", "AddN", "RealDiv", "DivNoNan", "Neg", "Maximum", "Minimum",
               "SquaredDifference", "Square", "Sqrt", "Rsqrt", "RsqrtGrad", "Reciprocal", "BiasAdd",
               "Exp", "Log", "Tanh", "TanhGrad", "Sigmoid", "SigmoidGrad", "Softplus", "Abs",
               "Pow", "FloorDiv", "FloorMod", "Select", "SelectV2",
               # the loss gradient is written over the logits
               "SparseSoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogits"}
_FORWARD_CONVS = {"Conv2D", "DepthwiseConv2dNative"}
_FILTER_GRADS = {"Conv2DBackpropFilter", "DepthwiseConv2dNativeBackpropFilter"}
_CONVS = _FORWARD_CONVS | _FILTER_GRADS | {"Conv2DBackpropInput",
                                           "DepthwiseConv2dNativeBackpropInput"}
_DEPTHWISE = {"DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
              "DepthwiseConv2dNativeBackpropFilter"}


class StepGraph:
    """The live ops of a traced step, their dependencies, and the buffers each
    allocates and reads."""

    def __init__(self, graph):
        live = live_ops(graph)
        self.ops = [op for op in graph.get_operations() if op.name in live]
        index = {op.name: i for i, op in enumerate(self.ops)}
        self.deps = []
        self.users = [[] for _ in self.ops]
        for i, op in enumerate(self.ops):
            parents = {index[t.op.name] for t in op.inputs}
            parents |= {index[c.name] for c in op.control_inputs}
            self.deps.append(len(parents))
            for p in parents:
                self.users[p].append(i)
        for users in self.users:
            users.sort()
        self.size, self.dtype, buffer_of = {}, {}, {}
        self.allocates = [[] for _ in self.ops]
        for i, op in enumerate(self.ops):
            for t in op.outputs:
                home = owner(t)
                if home.op.type in _NOT_ALLOCATED or home.op.name not in live:
                    continue
                if not nbytes(home):
                    continue
                buffer_of[t.name] = home.name
                if home is t:
                    self.size[t.name], self.dtype[t.name] = nbytes(t), t.dtype
                    self.allocates[i].append(t.name)
        self.reads = []
        self.readers = collections.Counter()
        for op in self.ops:
            read = (buffer_of[t.name] for t in op.inputs if t.name in buffer_of)
            buffers = list(dict.fromkeys(read))
            self.reads.append(buffers)
            self.readers.update(buffers)
        self.pinned = {buffer_of.get(t.name) for t in graph.outputs}
        self.cheap = [op.type in _CHEAP for op in self.ops]
        self.forwards = [op.type in _FORWARDING for op in self.ops]
        self.seconds = [0.0 if cheap else op_seconds(op)
                        for cheap, op in zip(self.cheap, self.ops)]


def op_seconds(op):
    """A rough duration: only the order in which concurrent ops finish matters."""
    moved = sum(nbytes(t) for t in list(op.inputs) + list(op.outputs))
    flops = 0
    if op.type in _CONVS:
        kernel = op.outputs[0] if op.type in _FILTER_GRADS else op.inputs[1]
        # the activation-sized tensor: the output, or the gradient coming in
        large = op.outputs[0] if op.type in _FORWARD_CONVS else op.inputs[2]
        if kernel.shape.rank == 4 and kernel.shape.is_fully_defined() and large.shape.is_fully_defined():
            kh, kw, cin, _ = kernel.shape.as_list()
            depth = 1 if op.type in _DEPTHWISE else cin
            flops = 2 * large.shape.num_elements() * kh * kw * depth
    return 2e-6 + moved / 4e9 + flops / 30e9
