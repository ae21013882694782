"""Which memory-saving tricks `tfseg.memory.rewrite` applies: `RewriteOptions`.

One vocabulary for the switches: the dataclass's field names are also the option names
that `tfseg.memory.blocks.register_twin` takes ("fuse_relu_conv", "lean_attention"),
asked with `RewriteOptions.on`.
"""

import dataclasses

from tfseg.layers import InplaceBatchNormalization, conv_kernels, fused_norm

__all__ = ["RewriteOptions", "of"]


@dataclasses.dataclass(frozen=True)
class RewriteOptions:
    """The tricks `tfseg.memory.rewrite` and `tfseg.memory.changes` apply; each on by
    default. Frozen: make another with `replace`. Each switch is True or False: any other
    value ("no", None, 0) is a TypeError naming the field.

    Attributes:
      fuse_separable: wrap each [activation/ZeroPadding2D ->] DepthwiseConv2D ->
        norm [-> activation] -> linear Conv2D chain (a separable conv, e.g.
        DeepLab's or MobileNetV2's) in `Recompute(block, tail=conv)`: it keeps
        only the chain's input, runs the cheap depthwise part again in the
        backward pass and never runs the conv twice. Inside, the single-layer
        twins below apply too, which shrinks the block's second run. Also each
        [activation [-> ZeroPadding2D] ->] `SeparableConv2D` layer (Xception's) as
        `ActivationSeparableConv2D`, which keeps only its input.
      fuse_relu_depthwise: replace ReLU [-> ZeroPadding2D] -> DepthwiseConv2D
        (either order) by `ReluDepthwiseConv2D`, and any other elementwise
        activation there (ReLU6, leaky ReLU, swish, hard-swish, GELU, ...: see
        `tfseg.layers.elementwise`) by `ActivationDepthwiseConv2D`, where each
        output feeds only the next layer: the conv keeps the activation's input
        and runs the activation again in its backward pass.
      fuse_relu_conv: the same for an activation [-> ZeroPadding2D] -> Conv2D, by
        `ReluConv2D` or `ActivationConv2D`, and -> MaxPooling2D, by
        `ActivationMaxPooling2D` (ResNet's stem); also a squeeze-and-excitation
        `Multiply([x, s])` -> Conv2D, by `ActivationConv2D(x, scale=s)`, which
        does not keep the product; and -> Dense, by `ActivationDense` (a
        transformer MLP's GELU output is not kept). Also ReLUs -> Concatenate read
        only by Conv2D, MaxPooling2D and AveragePooling2D layers (Inception's blocks):
        each reader takes the ReLUs' inputs as parts (`input_parts`; average pools by
        `ActivationAveragePooling2D`). Also the Dense pairs and registered twins inside
        subclassed blocks (`tfseg.memory.blocks`).
      inplace_norm: replace every stock `BatchNormalization`, `GroupNormalization`,
        `LayerNormalization` and `RMSNormalization` by its output-only twin (a layer
        norm whose gamma starts at zero stays stock, and the log says so).
      lean_dilated: replace the other dilated `DepthwiseConv2D`s by
        `LeanDepthwiseConv2D`, which does not keep a space-to-batch copy.
      fold_residual: fold a two-input `Add` right after an output-only norm (a
        residual connection) into the norm: it returns the sum and keeps it
        instead of its own output, rebuilding that as sum - other input (within
        an ulp of the sum). The Add's layer is gone; the norm's name and weights
        stay. Where the other input is a plain ReLU's output that only convs and
        such Adds read (ResNet's block outputs), that ReLU is not made at all: the
        convs take it in and the norm adds relu(input) (`residual_relu`). Needs
        `inplace_norm`.
      lean_attention: replace every stock `MultiHeadAttention` by
        `LeanMultiHeadAttention`, which computes its probabilities again in the
        backward pass instead of keeping them (dropout on them replayed from its
        seed); also registered attention blocks' twins (`tfseg.memory.blocks`).
      lean_upsampling: where a nested model (a backbone) ends in an `UpSampling2D`
        (bilinear or nearest) that only a 1x1 `Conv2D` after it reads, rewrite the
        nested model without it and the conv as `UpsampledConv2D`, which convolves
        first and keeps the small map (keras-hub's DeepLabV3). The nested model in the
        rewritten model then returns the map before the upsampling. A nested
        `Sequential` keeps its upsampling. Likewise where `Resizing` outputs are
        concatenated for a nested model that starts with a 1x1 conv (SegFormer's
        decoder): the conv becomes `ResizedConcatConv2D` over the maps before their
        resize, and the nested model starts from the conv's output.
      trace_blocks: take apart a subclassed block that no entry of
        `tfseg.memory.blocks` knows (keras-hub's MobileNetV3 and HGNetV2 blocks, DeiT's
        and DINOv2's encoder layers) as a functional model traced from its `call`
        (`tfseg.memory.traced`), where the trace is its whole computation: the other
        tricks then apply inside it as in a nested model. Its sublayers are the same
        objects, so its variables keep their paths.

    Example:

    >>> options = RewriteOptions().replace(fold_residual=False)
    >>> options.on("fuse_relu_conv"), options.on("fold_residual")
    (True, False)
    >>> RewriteOptions.none().on("lean_attention")
    False
    >>> RewriteOptions.all() == RewriteOptions()
    True
    """

    fuse_separable: bool = True
    fuse_relu_depthwise: bool = True
    fuse_relu_conv: bool = True
    inplace_norm: bool = True
    lean_dilated: bool = True
    fold_residual: bool = True
    lean_attention: bool = True
    lean_upsampling: bool = True
    trace_blocks: bool = True
    # Not switches. `chunked`: ((depthwise conv name, k), ...): the fused separable convs
    # (`fuse_separable`) of these depthwise convs run their backward passes a k-th of
    # their channels at a time (`Recompute(chunks=k)`): where a backward pass runs while
    # the most is kept (DeepLab's head), its maps then live a k-th at a time. `unpaid`:
    # the tricks `tfseg.memory.paying` turned off, each (name, the bytes the step keeps
    # with it, without it), which the summary names. Without `fuse_separable` nothing is
    # chunked.
    chunked: tuple = dataclasses.field(default=(), metadata={"switch": False})
    unpaid: tuple = dataclasses.field(default=(), metadata={"switch": False})
    # Not a trick: whether `rewrite` weighs the tricks where its model would keep more
    # than stock's (`tfseg.memory.rewrite`); False builds them where they are found.
    weigh: bool = dataclasses.field(default=True, metadata={"switch": False})
    # Not tricks either: the kernels' forms the twins take (`forms_for`), each twin its
    # own, kept in its config: `depthwise_kernel` (`--depthwise_kernel`,
    # `tfseg.layers.conv_kernels.FORMS`) the depthwise twins' and `Recompute` tails';
    # `fused_norm` (`--fused_norm`, `tfseg.layers.fused_norm.FORMS`) the batch-norm
    # twin's. "auto", the default, is each one's measured choice.
    depthwise_kernel: str = dataclasses.field(default="auto", metadata={"switch": False})
    fused_norm: str = dataclasses.field(default="auto", metadata={"switch": False})

    def __post_init__(self):
        # A switch is read by truth: "no", "false" and None were taken, and "no" is true.
        for name in self.names() + ("weigh",):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise TypeError(f"RewriteOptions.{name} must be True or False (a bool), got "
                                f"{value!r} (a {type(value).__name__})")
        for name in ("chunked", "unpaid"):
            value = getattr(self, name)
            if not isinstance(value, tuple):
                raise TypeError(f"RewriteOptions.{name} must be a tuple, got {value!r} "
                                f"(a {type(value).__name__})")
        for entry in self.chunked:
            name, chunks = (entry if isinstance(entry, (tuple, list)) and len(entry) == 2
                            else (None, None))
            if (not isinstance(name, str) or isinstance(chunks, bool)
                    or not isinstance(chunks, int) or chunks < 1):
                raise ValueError(f"RewriteOptions.chunked takes (depthwise conv name, chunks "
                                 f"of at least 1) pairs, got {entry!r}")
        for name, forms in (("depthwise_kernel", conv_kernels.FORMS),
                            ("fused_norm", fused_norm.FORMS)):
            if getattr(self, name) not in forms:
                raise ValueError(f"RewriteOptions.{name} must be one of {forms}, got "
                                 f"{getattr(self, name)!r}")

    @classmethod
    def names(cls):
        """The option names (the switches), in field order."""
        return tuple(field.name for field in dataclasses.fields(cls)
                     if field.metadata.get("switch", True))

    @classmethod
    def all(cls):
        """Every trick on (the default)."""
        return cls(**dict.fromkeys(cls.names(), True))

    @classmethod
    def none(cls):
        """Every trick off: a rewrite then changes nothing but its `recompute` segments."""
        return cls(**dict.fromkeys(cls.names(), False))

    def replace(self, **changes):
        """A copy with `changes` (option name -> bool); an unknown name is a TypeError."""
        return dataclasses.replace(self, **changes)

    def on(self, name):
        """Whether the option `name` (a field name, e.g. "fuse_relu_conv") is on; a
        ValueError for a name that is none, so a misspelt registration fails loudly."""
        if name not in self.names():
            raise ValueError(f"unknown rewrite option {name!r}; the options are "
                             f"{', '.join(self.names())}")
        return getattr(self, name)

    def forms_for(self, cls):
        """{constructor argument: form} of these options' kernel forms that a layer of
        class `cls` takes: `kernel_form` (`depthwise_kernel`) for the depthwise twins and
        `Recompute`, `norm_form` (`fused_norm`) for the batch-norm twin; {} for others.

        >>> RewriteOptions(fused_norm="false").forms_for(InplaceBatchNormalization)
        {'norm_form': 'false'}
        """
        if issubclass(cls, conv_kernels.TakesKernelForm):
            return {"kernel_form": self.depthwise_kernel}
        if issubclass(cls, InplaceBatchNormalization):
            return {"norm_form": self.fused_norm}
        return {}


def of(options):
    """`options` as `RewriteOptions`: None is the default (every trick on); anything
    else that is not one is a TypeError (a bool passed where a switch once was)."""
    if options is None:
        return RewriteOptions()
    if not isinstance(options, RewriteOptions):
        raise TypeError(f"options must be a tfseg.memory.RewriteOptions or None, not "
                        f"{type(options).__name__}: pass RewriteOptions(fuse_separable=False, "
                        f"...) instead of the switches as arguments")
    return options
