"""The memory rewrite's rules, and what they find: `Changes`.

A rule is a function that looks at the graph being rewritten (a `Finding`) and plans
twins for the one pattern it knows, through `Finding.claim`: which layer becomes which
twin, which node builds otherwise than as its own layer (a plan from
`tfseg.memory.plans`), which nodes a block runs, and the item the summary names it by
in a record declared once (`record`). `tfseg.memory.patterns.changes` runs the rules in
`ORDER`, each once over the whole graph; a layer an earlier rule replaced is not
offered to a later one (`Finding.open_nodes`), and a node two rules plan is an error,
not a silent choice.

A stock layer that takes its twin one for one needs no rule of its own: a row of
`tfseg.memory.twins.TWINS` (`add_twin` from outside the package). A pattern is one rule:

>>> record("example", lambda pairs: f"took {len(pairs)} ...")  # doctest: +SKIP
>>> @rule("example_twin", option="fuse_relu_conv", after="activation_conv")
... def example_twin(finding):
...     for node in finding.open_nodes():
...         act = some_pattern(finding.graph, node)
...         if act is not None:
...             finding.claim(act, plan=PASSES)
...             finding.claim(node, twin=SomeTwin, record=("example", (act.operation.name,
...                                                                    node.operation.name)))

A rule of the package runs at its name's place in `ORDER`; one registered from outside
it runs right after the rule `after` names (after those registered there before it),
or, without `after`, last. Rules live in `conv_rules.py`, `norm_rules.py`,
`nested_rules.py` and `block_rules.py`; the one-for-one twins' in `twins.py`.
"""

import dataclasses
import itertools

import keras

from tfseg.memory.graph import Graph
from tfseg.memory.options import RewriteOptions

__all__ = ["Changes", "Finding", "ORDER", "RULES", "record", "rule"]

# The package's rules, in the order they run: each reads what the rules before it
# planned and is offered what they left (`Finding.open_nodes`), so where two patterns
# match one node the earlier takes it; `residual_folds` folds the norms made output-only
# before it, and `idle_norms`, last, reads every plan.
ORDER = ("recompute_segments", "unpaid", "traced_blocks", "tuned_layers",
         "resized_concat_separable", "separable", "shared_relus", "norms", "relu_concat",
         "activation_max_pooling", "layer_norms", "attention", "resized_concat_conv",
         "inside_blocks", "activation_dense", "separable_layers", "upsampled_conv",
         "activation_depthwise", "activation_conv", "scaled_conv", "lean_dilated",
         "logits_resize", "residual_folds", "idle_norms")
# The registered rules, in the order they run.
RULES = []
# record name -> (what an empty one is: list or dict, says(items) -> a phrase of the summary)
RECORDS = {}
NOTHING = "nothing to change"
_REGISTERED = itertools.count()  # rules registered from outside `ORDER`, in turn


@dataclasses.dataclass(frozen=True)
class Rule:
    """A registered rule: `find(finding)` runs where `options` is empty or one of the
    `RewriteOptions` fields it names is on; rules run sorted by `place`."""

    name: str
    place: tuple
    options: tuple
    find: object


def rule(name, *, option=None, after=None):
    """Registers the decorated `find(finding)` as the rule `name`, run where `option` (a
    `RewriteOptions` field name, or a tuple of them: any on) is on; None: always. A name
    in `ORDER` runs at its place there; any other right after the rule `after` (a name
    in `ORDER`, or a rule registered before), or, with `after` None, last."""
    options = (option,) if isinstance(option, str) else tuple(option or ())
    for one in options:
        RewriteOptions().on(one)  # an unknown name: a ValueError now, not a silent no-op
    if any(r.name == name for r in RULES):
        raise ValueError(f"a rewrite rule named {name!r} exists")
    if name in ORDER:
        if after is not None:
            raise ValueError(f"the rewrite rule {name!r} runs at its place in ORDER, "
                             f"not after {after!r}")
        place = (ORDER.index(name),)
    elif after is None:
        place = (len(ORDER), next(_REGISTERED))
    else:
        anchor = (ORDER.index(after),) if after in ORDER else next(
            (r.place for r in RULES if r.name == after), None)
        if anchor is None:
            raise ValueError(f"no rewrite rule {after!r} for {name!r} to run after")
        place = (*anchor, next(_REGISTERED))

    def decorator(find):
        RULES.append(Rule(name, place, options, find))
        RULES.sort(key=lambda r: r.place)
        return find
    return decorator


def record(name, says, kind=list):
    """Declares the record `name` of `Changes` (an empty `kind` to start) and its phrase
    in the summary, `says(items)`, printed where the record is not empty."""
    if name in RECORDS or hasattr(Changes(), name):
        raise ValueError(f"the rewrite record {name!r} is declared twice, or is a name "
                         f"Changes holds otherwise")
    RECORDS[name] = (kind, says)


class Changes:
    """What `rewrite` changes: one record per kind of change, by layer name, read as
    attributes (`changes.fused`: (activation, conv) pairs; `RECORDS` lists them), and
    what building it takes: `replacements` (layer name -> (twin class, config extras)),
    `actions` (id(node) -> its plan), `blocks` (id(last node) -> `plans.Block`, built
    at the model's level), `inner` (block name -> the blocks in it) and `cuts` (nested
    model name -> {"start"/"end": the tensor its rewrite starts or ends at}); and
    `nested` (nested model name -> its own `Changes`, which `str()` names too)."""

    def __init__(self):
        self.records = {name: kind() for name, (kind, _) in RECORDS.items()}
        self.replacements, self.actions, self.blocks, self.inner, self.cuts = {}, {}, {}, {}, {}
        self.nested = {}

    def __getattr__(self, name):
        records = self.__dict__.get("records", {})
        if name not in records:
            raise AttributeError(name)
        return records[name]

    @property
    def serial(self):
        """Segment name -> the node ids of each of its branches (`SerialBranches`)."""
        return {b.name: b.branches for b in self.blocks.values() if b.branches is not None}

    def __str__(self):
        phrases = [RECORDS[name][1](items) for name, items in self.records.items() if items]
        phrases += [f"in {name}: {inner}" for name, inner in self.nested.items()
                    if str(inner) != NOTHING]
        return "; ".join(phrases) or NOTHING


class Finding:
    """What the rules read while `changes` runs over `model`'s graph, and what they
    claim (`claim`): the sets below are written there alone, and read by the rules."""

    def __init__(self, model, options, recompute, traced=((), None)):
        self.graph = Graph(model)
        # The blocks `model` was made of, taken apart from traces of their calls before
        # the rules run (`tfseg.memory.traced.inline`), and block name -> why its call
        # was not traced.
        self.taken_apart, self.untraced = list(traced[0]), dict(traced[1] or {})
        self.options = options
        self.recompute = tuple(recompute or ())
        self.changes = Changes()
        # ids of the nodes inside blocks (recompute segments, fused separable convs)
        self.taken = set()
        self.segment_of = {}  # id(node) -> the name of the segment it is in
        self.tails = set()  # ids of the nodes a block runs as its tail (`Recompute(tail=)`)
        self.relu_residuals = set()  # ids of Adds whose norm adds relu(other input)
        self._said = {}  # layer name -> the (record, item) its twin was named by

    def open_nodes(self):
        """The graph's nodes no earlier rule planned: not a block's tail, not a node
        with a plan, not a node of a layer already replaced (checked as each is
        reached)."""
        for node in self.graph.nodes:
            if (id(node) not in self.tails and id(node) not in self.changes.actions
                    and node.operation.name not in self.replaced):
                yield node

    @property
    def replaced(self):
        return self.changes.replacements

    def claim(self, target, *, twin=None, config=None, plan=None, block=None, within=None,
              fold_relu=False, cut=None, stock=False, record=None):
        """Plans `target`, a node of `graph` (or a layer, for `twin` and `stock` alone):
        the one way a rule changes what the rewrite builds. Adds `record` ((record
        name, item)) to the summary (`add`).

        - `twin`: its layer builds as `twin.from_config({**the layer's config, **config})`.
        - `plan`: the node builds by `plan` (`tfseg.memory.plans`) instead of calling
          its layer; a node that two rules plan is an AssertionError.
        - `block`: a `plans.Block` keyed by the node, inside the block named `within`
          (`Changes.inner`) or, None, at the model's level; its nodes are taken, the
          node too where it is the block's tail; a recompute segment's (`tail` None)
          marked as in it.
        - `fold_relu`: the norm folded into this Add adds relu(its other input).
        - `cut`: ("start" or "end", a tensor): the nested model this node calls starts or
          ends there (`Changes.cuts`).
        - `stock`: its layer stays stock after all: its twin, and the item it was
          named by, are taken back.
        """
        layer = target if isinstance(target, keras.Operation) else target.operation
        if twin is not None:
            self.changes.replacements[layer.name] = (twin, dict(config or {}))
            if record is not None:
                self._said[layer.name] = record
        if stock:
            del self.changes.replacements[layer.name]
            said = self._said.pop(layer.name, None)
            if said is not None:
                self.changes.records[said[0]].remove(said[1])
        if plan is not None:
            if id(target) in self.changes.actions:
                raise AssertionError(f"two rewrite rules plan the node of {layer.name}")
            self.changes.actions[id(target)] = plan
        if block is not None:
            self._block(target, block, within)
        if fold_relu:
            self.relu_residuals.add(id(target))
        if cut is not None:
            self.changes.cuts.setdefault(layer.name, {})[cut[0]] = cut[1]
        if record is not None:
            self.add(*record)

    def _block(self, node, block, within):
        if block.tail is node:  # its Recompute runs the node: no later rule offers it
            self.tails.add(id(node))
            self.taken.add(id(node))
        elif block.tail is None:  # a segment: the blocks of its separable convs go in it
            self.segment_of.update(dict.fromkeys(block.inside, block.name))
        self.taken |= block.inside
        blocks = self.changes.blocks if within is None else self.changes.inner.setdefault(
            within, {})
        blocks[id(node)] = block

    def add(self, name, item):
        """Adds `item` to the record `name`: appended to a list record, or a (key, value)
        pair set in a dict one."""
        records = self.changes.records[name]
        if isinstance(records, dict):
            records[item[0]] = item[1]
        else:
            records.append(item)


def _unpaid(items):
    return "kept stock where the twins did not pay (the traced step keeps more " \
        "with them): " + ", ".join(f"{name} ({with_:,} bytes kept with it, {without:,} without)"
                                   for name, with_, without in items)


record("unpaid", _unpaid)


@rule("unpaid")
def unpaid(finding):
    """Names the tricks `tfseg.memory.paying` turned off (`RewriteOptions.unpaid`)."""
    for item in finding.options.unpaid:
        finding.add("unpaid", item)
