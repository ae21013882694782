"""The upsampling rules (`lean_upsampling`): across a nested model's boundary
(`tfseg.memory.nested`), a 1x1 conv that takes in the upsampling before it, or the
resized maps concatenated for it; at the model's output, the logits' resize that the
training loss takes in."""

from tfseg.layers import LogitsResize, ResizeLike, UpsampledConv2D
from tfseg.memory.matchers import plain_conv
from tfseg.memory.nested import resized_concat_conv, upsampled_conv
from tfseg.memory.plans import PASSES, ConcatConv
from tfseg.memory.rules import record, rule

record("upsampled", lambda pairs: f"moved {len(pairs)} upsamplings after the 1x1 conv "
                                  f"that reads them")
record("loss_resize", lambda names: f"the training loss takes the logits before {names[0]}")


@rule("resized_concat_conv", option="lean_upsampling")
def resized_concat(finding):
    """Resized maps concatenated for a nested model that starts with a 1x1 conv: the
    conv takes them in (`ResizedConcatConv2D`), the nested model starts after it."""
    for node in finding.open_nodes():
        if id(node) in finding.taken or id(node) in finding.changes.blocks:
            continue  # a segment's: it builds its own
        found = resized_concat_conv(finding.graph, node)
        if found is None or any(id(part) in finding.taken for part in found[3]):
            continue
        nested, conv, sizes, resizes = found
        for part in resizes:
            finding.claim(part, plan=PASSES)  # the twin resizes
        finding.claim(node, plan=ConcatConv(conv, sizes))
        finding.claim(nested, cut=("start", conv.output), record=(
            "upsampled", (f"{node.operation.name} of {len(resizes)} resized maps",
                          f"{nested.operation.name}/{conv.name}")))


@rule("upsampled_conv", option="lean_upsampling")
def upsampled(finding):
    """A nested model's final upsampling that only a 1x1 conv reads: the conv takes it
    in (`UpsampledConv2D`), the nested model ends before it."""
    for node in finding.open_nodes():
        if id(node) in finding.taken or plain_conv(finding.graph, node) is None:
            continue
        found = upsampled_conv(finding.graph, node)
        if found is None:
            continue
        nested, upsampling = found
        finding.claim(nested, cut=("end", upsampling.input_tensors[0]), record=(
            "upsampled", (f"{nested.operation.name}/{upsampling.operation.name}",
                          node.operation.name)))
        finding.claim(node, twin=UpsampledConv2D,
                      config={"input_upsampling": upsampling.operation.size,
                              "input_interpolation": upsampling.operation.interpolation})


@rule("logits_resize", option="lean_upsampling")
def logits_resize(finding):
    """A `ResizeLike` that makes a single-output model's output from a 4-D map: a
    `LogitsResize`, whose input tfseg's training loss takes instead, keeping the small
    logits (`tfseg.layers.resized_loss`). The same layer to every other caller."""
    graph = finding.graph
    if len(graph.model.outputs) != 1:
        return
    for node in finding.open_nodes():
        layer = node.operation
        if (type(layer) is ResizeLike and id(node.outputs[0]) in graph.outputs
                and not graph.shared(layer) and len(node.input_tensors[0].shape) == 4):
            finding.claim(layer, twin=LogitsResize, record=("loss_resize", layer.name))
