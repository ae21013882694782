"""The memory rewrite's rules, and what they find: `Changes`.

A rule is a function that looks at the graph being rewritten (a `Finding`) and plans
twins for the one pattern it knows. For the summary it adds what it changes to a named
record (`Finding.add`); for the build it says which layers become which twin
(`Finding.replace`) and which nodes build otherwise than as their own layer
(`Finding.act`, with a plan from `tfseg.memory.plans`). `tfseg.memory.patterns.changes`
runs the rules in their stated `order`, each once over the whole graph; a layer an
earlier rule replaced is not offered to a later one (`Finding.open_nodes`), and a node
two rules plan is an error, not a silent choice.

A new twin is one rule:

>>> @rule("example_twin", order=999, option="fuse_relu_conv")  # doctest: +SKIP
... def example_twin(finding):
...     for node in finding.open_nodes():
...         if type(node.operation) is SomeStockLayer:
...             finding.replace(node.operation, SomeTwin)
...             finding.add("example", node.operation.name)

with its record declared once: `record("example", lambda names: f"made {len(names)} ...")`.
Rules live in `conv_rules.py`, `norm_rules.py`, `nested_rules.py` and `block_rules.py`.
"""

import dataclasses

from tfseg.memory.graph import Graph
from tfseg.memory.options import RewriteOptions

__all__ = ["Changes", "Finding", "RULES", "record", "rule"]

# The rules, in their order.
RULES = []
# record name -> (what an empty one is: list or dict, says(items) -> a phrase of the summary)
RECORDS = {}
NOTHING = "nothing to change"


@dataclasses.dataclass(frozen=True)
class Rule:
    """A registered rule: `find(finding)` runs where `options` is None or one of the
    `RewriteOptions` fields it names is on."""

    name: str
    order: int
    options: tuple
    find: object


def rule(name, *, order, option=None):
    """Registers the decorated `find(finding)` as the rule `name`, run at `order` (lower
    first) where `option` (a `RewriteOptions` field name, or a tuple of them: any on) is
    on; None: always."""
    options = (option,) if isinstance(option, str) else tuple(option or ())
    for one in options:
        RewriteOptions().on(one)  # an unknown name: a ValueError now, not a silent no-op

    if any(r.name == name or r.order == order for r in RULES):
        raise ValueError(f"a rewrite rule named {name!r} or at order {order} exists")

    def decorator(find):
        RULES.append(Rule(name, order, options, find))
        RULES.sort(key=lambda r: r.order)
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
    at the model's level), `inner` (segment name -> its blocks) and `cuts` (nested
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
    """What the rules read and write while `changes` runs over `model`'s graph."""

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
        self.tails = set()  # ids of fused separable convs' pointwise convs (`Recompute` runs them)
        self.relu_residuals = set()  # ids of Adds whose norm adds relu(other input)

    def open_nodes(self):
        """The graph's nodes no earlier rule planned: not a separable conv's tail, not a
        node with a plan, not a node of a layer already replaced (checked as each is
        reached)."""
        for node in self.graph.nodes:
            if (id(node) not in self.tails and id(node) not in self.changes.actions
                    and node.operation.name not in self.replaced):
                yield node

    @property
    def replaced(self):
        return self.changes.replacements

    def replace(self, layer, twin, **extra):
        """Builds `layer` as `twin.from_config({**layer's config, **extra})`."""
        self.changes.replacements[layer.name] = (twin, extra)

    def act(self, node, plan):
        """Builds `node` by `plan` (`tfseg.memory.plans`) instead of calling its layer."""
        if id(node) in self.changes.actions:
            raise AssertionError(f"two rewrite rules plan the node of {node.operation.name}")
        self.changes.actions[id(node)] = plan

    def add(self, name, item):
        """Adds `item` to the record `name`, a list (a dict record is written directly:
        `finding.changes.NAME[key] = value`)."""
        self.changes.records[name].append(item)


def _unpaid(items):
    return "kept stock where the twins did not pay (the traced step keeps more " \
        "with them): " + ", ".join(f"{name} ({with_:,} bytes kept with it, {without:,} without)"
                                   for name, with_, without in items)


record("unpaid", _unpaid)


@rule("unpaid", order=1)
def unpaid(finding):
    """Names the tricks `tfseg.memory.paying` turned off (`RewriteOptions.unpaid`)."""
    for item in finding.options.unpaid:
        finding.add("unpaid", item)
