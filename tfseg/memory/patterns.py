"""Where a functional Keras model can use the memory-saving twins: the `Changes`."""

import dataclasses

import keras

from tfseg.layers import (
    ActivationConv2D,
    ActivationDense,
    ActivationEinsumDense,
    LeanMultiHeadAttention,
    ActivationDepthwiseConv2D,
    ActivationMaxPooling2D,
    LeanDepthwiseConv2D,
    ReluConv2D,
    ReluDepthwiseConv2D,
    UpsampledConv2D,
)
from tfseg.layers import elementwise
from tfseg.memory.inside import inner_twins, stateless_twin
from tfseg.memory.matchers import (NORM_TWINS, Graph, activation_chain, relu_start,
                                   residual_folds, scaled_input, separable_chain,
                                   shared_relus)
from tfseg.memory.nested import resized_concat_conv, upsampled_conv
from tfseg.memory.options import of
from tfseg.memory.segments import branch_nodes, segment_nodes

__all__ = ["Changes", "Graph", "changes"]


@dataclasses.dataclass
class Changes:
    """What `rewrite` changes, by layer name."""

    separable: list = dataclasses.field(default_factory=list)  # (depthwise, pointwise) pairs
    fused: list = dataclasses.field(default_factory=list)  # (activation, conv) pairs
    lean: list = dataclasses.field(default_factory=list)  # dilated depthwise convs
    inplace: list = dataclasses.field(default_factory=list)  # norm layers
    layer_norms: list = dataclasses.field(default_factory=list)  # output-only layer norms
    attention: list = dataclasses.field(default_factory=list)  # LeanMultiHeadAttention
    # subclassed layer name -> twins inside a rebuilt copy of it (`tfseg.memory.inside`)
    inside: dict = dataclasses.field(default_factory=dict)
    # (nested model/its final upsampling, the 1x1 conv after it that takes it in)
    upsampled: list = dataclasses.field(default_factory=list)
    kept_stock: list = dataclasses.field(default_factory=list)  # (layer name, why it has no twin)
    recomputed: list = dataclasses.field(default_factory=list)  # segment names
    residual: list = dataclasses.field(default_factory=list)  # (norm, Add) pairs folded
    serial: dict = dataclasses.field(default_factory=dict, repr=False)  # name -> branch node ids
    replacements: dict = dataclasses.field(default_factory=dict, repr=False)
    skipped: set = dataclasses.field(default_factory=set, repr=False)  # ReLU/pad nodes
    # id(node) -> (segment name, nodes inside, block input tensor, tail conv or None)
    blocks: dict = dataclasses.field(default_factory=dict, repr=False)
    # segment name -> its fused separable convs, as `blocks`: built inside its block
    inner: dict = dataclasses.field(default_factory=dict, repr=False)
    # id(Add node) -> (norm node, the other input): the norm adds it and the Add goes
    folds: dict = dataclasses.field(default_factory=dict, repr=False)
    # ids of folded Add nodes whose other input is a skipped ReLU's: the norm adds relu(it)
    relu_residuals: set = dataclasses.field(default_factory=set, repr=False)
    # id(conv node) -> (Multiply node, its full input, its [N, 1, 1, C] one): the conv
    # multiplies them itself (squeeze-and-excitation), and the Multiply goes
    scaled: dict = dataclasses.field(default_factory=dict, repr=False)
    # nested model name -> its final upsampling's node: rewritten without it
    trimmed: dict = dataclasses.field(default_factory=dict, repr=False)
    # id(Concatenate node) -> (the 1x1 conv starting the nested model that reads it,
    # `ResizedConcatConv2D`'s input_sizes): the conv takes in the concatenation
    concats: dict = dataclasses.field(default_factory=dict, repr=False)
    # nested model name -> its first conv: rewritten without it
    headless: dict = dataclasses.field(default_factory=dict, repr=False)

    def __str__(self):
        return (
            f"fused {len(self.separable)} separable convs and {len(self.fused)} activation+conv "
            f"pairs, "
            f"made {len(self.lean)} dilated depthwise convs lean and {len(self.inplace)} norms "
            f"output-only ({len(self.residual)} with their residual add), folded "
            f"{len(self.scaled)} channel scales into convs, made {len(self.layer_norms)} layer "
            f"norms output-only and {len(self.attention)} attention layers lean, "
            f"up to {sum(t.twin is not t.stock for ts in self.inside.values() for t in ts)} "
            f"more inside {len(self.inside)} "
            f"subclassed layers (where a copy rebuilds them), moved {len(self.upsampled)} "
            f"upsamplings after the 1x1 conv that reads them, recomputing "
            f"{len(self.recomputed)} blocks"
            + "".join(f"; kept {name} stock: {why}" for name, why in self.kept_stock)
        )


def _take_activation(result, graph, node, relu_twin, twin):
    """Records `node`'s twin (`relu_twin` for a plain ReLU) taking in the activation
    [and zero padding] before it, if there is one; returns whether there was."""
    act, pad = activation_chain(graph, node)
    if act is None:
        return False
    result.fused.append((act.operation.name, node.operation.name))
    result.skipped.add(id(act))
    plain = elementwise.is_plain_relu(act.operation)
    extra = {} if plain else {"input_activation": elementwise.serialize(act.operation)}
    if pad is not None:
        result.skipped.add(id(pad))
        extra["input_padding"] = pad.operation.padding
    result.replacements[node.operation.name] = (relu_twin if plain else twin, extra)
    return True


def _norm_or_attention(result, layer):
    """Records the twin of a stock layer norm, RMS norm or `MultiHeadAttention`, or
    why it keeps none."""
    if layer.name in result.replacements:
        return
    cls, why = stateless_twin(layer)
    if why is not None:
        result.kept_stock.append((layer.name, why))
    elif cls is not None:
        (result.attention if cls is LeanMultiHeadAttention else result.layer_norms).append(
            layer.name)
        result.replacements[layer.name] = (cls, {})


# Stock dense layers -> the twin that takes in the activation before them.
DENSE_TWINS = {keras.layers.Dense: ActivationDense,
               keras.layers.EinsumDense: ActivationEinsumDense}


def _take_dense_activation(result, graph, node):
    """Records an `ActivationDense` (`ActivationEinsumDense`) for an elementwise
    activation -> `node` (a stock `Dense` or `EinsumDense`, not LoRA or quantized): a
    transformer MLP's GELU output is not kept."""
    layer = node.operation
    if getattr(layer, "lora_enabled", False) or getattr(layer, "quantization_mode", None):
        return
    act, pad = activation_chain(graph, node)
    if act is None or pad is not None:
        return
    result.fused.append((act.operation.name, layer.name))
    result.skipped.add(id(act))
    result.replacements[layer.name] = (
        DENSE_TWINS[type(layer)], {"input_activation": elementwise.serialize(act.operation)})


def _segments(graph, recompute, result):
    """Records the `recompute` segments' blocks in `result`; returns (the ids of the nodes
    inside them, {id(node): its segment's name})."""
    taken, segment_of = set(), {}
    for segment in recompute or ():
        inside, start, end = segment_nodes(graph, segment)
        relu = relu_start(graph, start, inside | taken)
        if relu is not None:  # the block keeps the norm's output, kept anyway
            inside, start = inside | {id(relu)}, relu.input_tensors[0]
        if inside & taken:
            raise ValueError(f"recompute segment {segment.name!r} overlaps another")
        taken |= inside
        segment_of.update(dict.fromkeys(inside, segment.name))
        result.blocks[id(end)] = (segment.name, inside, start, None)
        if segment.branches:
            shared = set() if relu is None else {id(relu)}
            result.serial[segment.name] = branch_nodes(segment, inside, start, end, shared)
    return taken, segment_of


def _separables(graph, result, segment_of):
    """Records the separable convs that fuse (`Recompute(block, tail=conv)`) in `result`;
    returns (the ids of their nodes, the ids of their pointwise convs)."""
    fused, tails = set(), set()
    for node in graph.nodes:
        chain = None if id(node) in fused else separable_chain(graph, node)
        inside = {id(n) for n in chain or ()}
        owners = {segment_of.get(i) for i in inside | {id(node)}}
        # A separable conv inside a recompute segment fuses too (its block is built
        # inside the segment's): the segment's second run then keeps each one's
        # input only, not its depthwise output and its pointwise input as well.
        if not chain or inside & fused or len(owners) != 1:
            continue
        depthwise = next(n for n in chain if type(n.operation) is keras.layers.DepthwiseConv2D)
        result.separable.append((depthwise.operation.name, node.operation.name))
        fused |= inside | {id(node)}
        tails.add(id(node))
        owner = owners.pop()
        blocks = result.blocks if owner is None else result.inner.setdefault(owner, {})
        blocks[id(node)] = (f"{depthwise.operation.name}_recompute", inside,
                            chain[0].input_tensors[0], node)
    return fused, tails


def _conv(result, graph, node, options, taken):
    """Records the twin of `node`'s stock, unshared, channels-last `Conv2D` or
    `DepthwiseConv2D` (the upsampling, activation or channel scale it takes in, or a lean
    dilated depthwise conv), if it has one; any other node: nothing."""
    layer = node.operation
    conv_types = (keras.layers.DepthwiseConv2D, keras.layers.Conv2D)
    if type(layer) not in conv_types or graph.shared(layer):
        return
    if layer.data_format != "channels_last" or getattr(layer, "groups", 1) != 1:
        return
    found = (upsampled_conv(graph, node) if options.lean_upsampling and id(node) not in taken
             else None)
    if found is not None:
        nested, upsampling = found
        result.upsampled.append((f"{nested.operation.name}/{upsampling.operation.name}",
                                 layer.name))
        result.trimmed[nested.operation.name] = upsampling
        result.replacements[layer.name] = (UpsampledConv2D, {
            "input_upsampling": upsampling.operation.size,
            "input_interpolation": upsampling.operation.interpolation})
        return
    is_depthwise = type(layer) is keras.layers.DepthwiseConv2D
    fuse = options.fuse_relu_depthwise if is_depthwise else options.fuse_relu_conv
    twins = ((ReluDepthwiseConv2D, ActivationDepthwiseConv2D) if is_depthwise
             else (ReluConv2D, ActivationConv2D))
    if fuse and _take_activation(result, graph, node, *twins):
        return
    scaled = scaled_input(graph, node) if fuse and not is_depthwise else None
    if scaled is not None:
        result.scaled[id(node)] = scaled
        result.replacements[layer.name] = (ActivationConv2D, {"input_activation": None})
    elif options.lean_dilated and is_depthwise and tuple(layer.dilation_rate) != (1, 1):
        result.lean.append(layer.name)
        result.replacements[layer.name] = (LeanDepthwiseConv2D, {})


def changes(model, options=None, recompute=None):
    """Finds what `rewrite(model, options, recompute=recompute)` would change, without
    building anything: a `Changes`. See `rewrite`; `options` is a `RewriteOptions`
    (None: every trick on).

    Example:

    >>> stock = keras.applications.MobileNetV2(weights=None, input_shape=(64, 64, 3))
    >>> changes(stock, RewriteOptions.none()).inplace
    []
    """
    options = of(options)
    graph = Graph(model)
    result = Changes(recomputed=[segment.name for segment in recompute or ()])
    # nodes inside a recompute segment or a fused separable conv; id(node) -> its segment
    taken, segment_of = _segments(graph, recompute, result)
    # tails: the pointwise convs of fused separable convs (`Recompute` runs them)
    fused, tails = _separables(graph, result, segment_of) if options.fuse_separable else ((), ())
    taken |= set(fused)
    if options.fuse_relu_depthwise or options.fuse_relu_conv:
        for relu, (twins, adds) in shared_relus(
                graph, taken, options.fuse_relu_depthwise, options.fuse_relu_conv,
                fold_adds=options.inplace_norm and options.fold_residual).items():
            result.skipped.add(id(relu))
            result.relu_residuals |= adds
            for name, cls in twins.items():
                result.fused.append((relu.operation.name, name))
                result.replacements[name] = (cls, {})
    for node in graph.nodes:
        layer = node.operation
        if id(node) in tails or layer.name in result.replacements:
            continue  # a separable conv's tail, or a shared ReLU's user
        if (options.inplace_norm and type(layer) in NORM_TWINS
                and layer.name not in result.replacements):
            result.inplace.append(layer.name)  # once, also for a layer called twice
            result.replacements[layer.name] = (NORM_TWINS[type(layer)], {})
        if (type(layer) is keras.layers.MaxPooling2D and not graph.shared(layer)
                and layer.data_format == "channels_last" and options.fuse_relu_conv):
            _take_activation(result, graph, node, ActivationMaxPooling2D, ActivationMaxPooling2D)
        if ((options.inplace_norm and type(layer) in (keras.layers.LayerNormalization,
                                                      keras.layers.RMSNormalization))
                or (options.lean_attention
                    and type(layer) is keras.layers.MultiHeadAttention)):
            _norm_or_attention(result, layer)
        concat = (resized_concat_conv(graph, node)  # not a segment's: it builds its own
                  if options.lean_upsampling and id(node) not in taken
                  and id(node) not in result.blocks else None)
        if concat is not None and not any(id(part) in taken for part in concat[3]):
            nested, conv, sizes, resizes = concat
            result.skipped |= {id(part) for part in resizes}  # the twin resizes
            result.concats[id(node)] = (conv, sizes)
            result.headless[nested.operation.name] = conv
            result.upsampled.append((f"{layer.name} of {len(resizes)} resized maps",
                                     f"{nested.operation.name}/{conv.name}"))
            continue
        if layer.name not in result.replacements and layer.name not in result.inside:
            twins, kept = inner_twins(layer, options)
            result.kept_stock += [k for k in kept if k not in result.kept_stock]
            if twins:
                result.inside[layer.name] = twins
        if type(layer) in DENSE_TWINS and options.fuse_relu_conv and not graph.shared(layer):
            _take_dense_activation(result, graph, node)
        _conv(result, graph, node, options, taken)
    norms = set(result.inplace) | set(result.layer_norms)
    result.folds = residual_folds(graph, taken, norms) if options.fold_residual else {}
    if not result.relu_residuals <= set(result.folds):
        raise AssertionError("a shared ReLU's add was marked to fold and is not folded")
    by_id = {id(node): node for node in graph.nodes}
    result.residual = [(norm.operation.name, by_id[add].operation.name)
                       for add, (norm, _) in result.folds.items()]
    return result
