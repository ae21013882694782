"""Which XLA block (`tfseg.xla.Blocks`, `--jit_compile=blocks`) each layer of a
DeepLabv3+ runs in: a backbone unit, the stem, the ASPP or the decoder."""

from tfseg.models import xception


def block_of(layer, middle_repeats=None, specs=xception.XCEPTION65):
    """The block a layer of a DeepLabv3+ is in: its backbone unit ("entry_block2",
    "middle_unit3"), the stem, "aspp" or "decoder" (the logits too); else its own name
    (a keras.applications backbone's layers, or a nested backbone, each one block).
    Names are matched as `tfseg.models.deeplab.part_of` matches them: prefixes this
    package gave its layers.

    Example:
        functools.partial(block_of, middle_repeats=config.model.middle_repeats)
    """
    owners = [(unit, unit) for spec in specs for unit in xception.unit_names(spec, middle_repeats)]
    owners += [(f"{xception.STEM}{k}", xception.STEM_SEGMENT) for k in (1, 2)]
    owners += [("aspp", "aspp"), ("decoder", "decoder"), ("logits", "decoder")]
    for prefix, block in owners:
        if layer.name == prefix or layer.name.startswith(prefix + "_"):
            return block
    return layer.name
