"""Which twin a stock layer takes: `TWINS`, the one table of the one-for-one twins, the
rules that place them, and the tables of the fused twins the other rules share.

A row (`Twin`) says that a layer of exactly the class `stock` (a subclass may change
the maths) builds as `twin` where the `RewriteOptions` field `option` is on, and which
record of the summary names it. The rule that places a record's rows is declared with
`twin_rule`; `add_twin` adds a row from outside the package, and a rule for its record
where none places it yet. Example, a twin of `keras.layers.PReLU` from a user's module
(a subclass of it with the same arguments and variables):

>>> record("counted", lambda names: f"counted {len(names)} PReLUs")  # doctest: +SKIP
>>> add_twin(Twin(keras.layers.PReLU, CountingPReLU, "lean_attention", "counted"))
"""

import dataclasses

import keras

from tfseg.layers import (
    ActivationDense,
    ActivationEinsumDense,
    InplaceBatchNormalization,
    InplaceGroupNormalization,
    InplaceLayerNormalization,
    InplaceRMSNormalization,
    LeanDepthwiseConv2D,
    LeanMultiHeadAttention,
    ReluConv2D,
    ReluDepthwiseConv2D,
)
from tfseg.memory.options import RewriteOptions
from tfseg.memory.rules import RECORDS, RULES, rule

__all__ = ["TWINS", "Twin", "add_twin", "twin_rule"]


@dataclasses.dataclass(frozen=True)
class Twin:
    """A layer of exactly class `stock` builds as `twin` (from its config: the same
    arguments and variables) where the `RewriteOptions` field `option` is on, named in
    the summary's record `record` (declared with `tfseg.memory.rules.record`).

    `fits(layer)`: whether the twin is for this layer of `stock` at all (None: for
    every one); others pass by silently. `why_not(layer)`: why a layer that fits stays
    stock, which the summary says ("kept NAME stock: WHY"), or None. `once`: only a
    layer the graph calls once takes it. `inside`: a copy of a subclassed block rebuilt
    with twins (`tfseg.memory.inside`) takes it too, by class: the twin adds no state.
    """

    stock: type
    twin: type
    option: str
    record: str
    fits: object = None
    why_not: object = None
    once: bool = False
    inside: bool = False


def tuned(layer):
    """Why `layer` keeps no twin although its class has one: LoRA terms or a quantized
    kernel, which a twin built from its config would leave out; None where it has
    neither."""
    if getattr(layer, "lora_enabled", False):
        return "LoRA-enabled: a twin would drop its LoRA terms"
    mode = getattr(layer, "quantization_mode", None)
    if mode:
        return f"quantized ({mode}): a twin would drop its quantized kernel"
    return None


def _gamma_at_zero(layer):
    # Its output-only backward divides by gamma: it would start at the guard.
    if layer.scale and isinstance(layer.gamma_initializer, keras.initializers.Zeros):
        return "gamma starts at zero"
    return None


def _dilated(layer):
    # `tuned_layers` says why a LoRA or quantized one stays stock.
    return (layer.data_format == "channels_last" and tuple(layer.dilation_rate) != (1, 1)
            and not tuned(layer))


TWINS = [
    Twin(keras.layers.BatchNormalization, InplaceBatchNormalization, "inplace_norm", "inplace",
         inside=True),
    Twin(keras.layers.GroupNormalization, InplaceGroupNormalization, "inplace_norm", "inplace",
         inside=True),
    # Its `rms_scaling` form divides by the variance, not the RMS: no twin computes that.
    Twin(keras.layers.LayerNormalization, InplaceLayerNormalization, "inplace_norm",
         "layer_norms", fits=lambda layer: not layer.rms_scaling, why_not=_gamma_at_zero,
         inside=True),
    Twin(keras.layers.RMSNormalization, InplaceRMSNormalization, "inplace_norm", "layer_norms",
         inside=True),
    Twin(keras.layers.MultiHeadAttention, LeanMultiHeadAttention, "lean_attention",
         "attention", inside=True),
    Twin(keras.layers.DepthwiseConv2D, LeanDepthwiseConv2D, "lean_dilated", "lean",
         fits=_dilated, once=True),
]
# Channel norms: the norm a separable conv's chain may hold (its block runs it again).
CHANNEL_NORMS = tuple(t.stock for t in TWINS if t.record == "inplace")
# Dense layers -> the twin that takes in the activation before them.
DENSE_TWINS = {keras.layers.Dense: ActivationDense,
               keras.layers.EinsumDense: ActivationEinsumDense}


def twin_of(layer):
    """(the row of `TWINS` for `layer`, or None where none is or it does not fit; why
    it stays stock all the same, or None)."""
    row = next((t for t in TWINS if t.stock is type(layer)), None)
    if row is None or (row.fits is not None and not row.fits(layer)):
        return None, None
    return row, row.why_not(layer) if row.why_not is not None else None


def twin_inside(layer):
    """The row whose twin `layer`, a sublayer of a subclassed block, takes in a rebuilt
    copy of the block (`Twin.inside`), or None."""
    row, why = twin_of(layer)
    return row if row is not None and row.inside and why is None else None


@dataclasses.dataclass(frozen=True)
class Placing:
    """The rule that places the rows of `TWINS` whose record is `record`, as they are
    when it runs: each open node's layer that fits a row takes its twin (once, also
    for a layer called twice, unless `Twin.once`) or stays stock, and the summary says
    why."""

    record: str

    def __call__(self, finding):
        for node in finding.open_nodes():
            layer = node.operation
            row, why = twin_of(layer)
            if (row is None or row.record != self.record
                    or (row.once and finding.graph.shared(layer))):
                continue
            if why is not None:
                finding.add("kept_stock", (layer.name, why))
            else:
                finding.claim(layer, twin=row.twin, record=(self.record, layer.name))


def twin_rule(name, record, after=None):
    """Registers the rule `name` (`tfseg.memory.rules.rule`) that places the rows of
    `TWINS` whose record is `record`, gated by their option."""
    options = {t.option for t in TWINS if t.record == record}
    if len(options) != 1 or record not in RECORDS:
        raise ValueError(f"the twins of the record {record!r} need one option and the "
                         f"record declared; they have {sorted(options)}")
    rule(name, option=options.pop(), after=after)(Placing(record))


def add_twin(twin, after=None):
    """Adds `twin` (a `Twin`) to `TWINS`, for every rewrite from now on; its record must be
    declared (`tfseg.memory.rules.record`). Where no rule places that record yet, one
    named as the record places it, run after the rule `after` or, None, last
    (`tfseg.memory.rules.rule`); where one does, under the same option."""
    RewriteOptions().on(twin.option)  # an unknown name: a ValueError now
    known = next((t for t in TWINS if t.stock is twin.stock), None)
    if known is not None:
        raise ValueError(f"{twin.stock.__name__} takes {known.twin.__name__} already")
    if twin.record not in RECORDS:
        raise ValueError(f"declare the record {twin.record!r} first: "
                         f"record({twin.record!r}, says)")
    placing = next((r for r in RULES if r.find == Placing(twin.record)), None)
    if placing is None:
        rule(twin.record, option=twin.option, after=after)(Placing(twin.record))
    elif placing.options != (twin.option,):
        raise ValueError(f"the rule {placing.name!r} places the record {twin.record!r} "
                         f"under {placing.options[0]}, not {twin.option}")
    TWINS.append(twin)


def fusable_conv(graph, layer, fuse_relu_depthwise, fuse_relu_conv):
    """The twin that can take a ReLU into `layer`, a conv called once in `graph`
    (`tfseg.memory.graph.Graph`), or None."""
    if type(layer) not in (keras.layers.DepthwiseConv2D, keras.layers.Conv2D):
        return None
    if graph.shared(layer) or layer.data_format != "channels_last" or tuned(layer):
        return None
    if type(layer) is keras.layers.DepthwiseConv2D:
        return ReluDepthwiseConv2D if fuse_relu_depthwise else None
    return ReluConv2D if fuse_relu_conv and getattr(layer, "groups", 1) == 1 else None
