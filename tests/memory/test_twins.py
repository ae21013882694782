"""The one-for-one twins' table (`tfseg.memory.twins.TWINS`): a twin added from outside
the package is one row, which a rule places under its option, and the rewrite builds
it with the stock layer's variables and outputs."""

import keras
import numpy as np
import pytest

from tfseg import memory
from tfseg.memory import RewriteOptions
from tfseg.memory.rules import RECORDS, RULES, record
from tfseg.memory.twins import TWINS, Twin, add_twin


@pytest.fixture
def tables():
    """The twins, rules and records as they were, after the test's own."""
    twins, rules, records = list(TWINS), list(RULES), dict(RECORDS)
    yield
    TWINS[:] = twins
    RULES[:] = rules
    RECORDS.clear()
    RECORDS.update(records)


class CountingPReLU(keras.layers.PReLU):
    """A toy twin: a stock PReLU (a layer with a weight no rule twins) that counts its
    calls."""

    calls = 0

    def call(self, inputs):
        CountingPReLU.calls += 1
        return super().call(inputs)


def prelu_net():
    inputs = keras.Input((9, 11, 3))
    x = keras.layers.Conv2D(4, 3, name="conv1")(inputs)
    x = keras.layers.PReLU(shared_axes=(1, 2), name="prelu1")(x)
    x = keras.layers.Conv2D(4, 3, name="conv2")(x)
    model = keras.Model(inputs, keras.layers.PReLU(name="prelu2")(x))
    rng = np.random.RandomState(1)
    for name in ("prelu1", "prelu2"):  # alphas apart from their zero start
        alpha = model.get_layer(name).alpha
        alpha.assign(rng.uniform(0.1, 0.5, alpha.shape).astype("float32"))
    return model


def test_a_twin_added_outside_the_package_is_one_row_placed_by_its_own_rule(tables):
    record("counted_prelus", lambda names: f"counted {len(names)} PReLUs")
    add_twin(Twin(keras.layers.PReLU, CountingPReLU, "lean_attention", "counted_prelus"))
    assert RULES[-1].name == "counted_prelus"  # outside ORDER: run last
    stock = prelu_net()
    summary = memory.changes(stock)
    assert summary.counted_prelus == ["prelu1", "prelu2"]
    assert "counted 2 PReLUs" in str(summary)
    new = memory.rewrite(stock)
    assert [type(new.get_layer(n)) for n in ("prelu1", "prelu2")] == [CountingPReLU] * 2
    assert {p: tuple(v.shape) for p, v in memory.variables_by_path(new).items()} == {
        p: tuple(v.shape) for p, v in memory.variables_by_path(stock).items()}
    images = np.random.RandomState(0).randn(2, 9, 11, 3).astype("float32")
    CountingPReLU.calls = 0
    np.testing.assert_array_equal(new(images), stock(images))
    assert CountingPReLU.calls == 2
    assert memory.changes(stock, RewriteOptions.none()).counted_prelus == []  # option off


def test_a_row_joins_the_rule_of_its_record_and_a_new_rule_runs_where_it_is_told(tables):
    rules = [r.name for r in RULES]
    add_twin(Twin(keras.layers.PReLU, CountingPReLU, "lean_attention", "attention"))
    assert [r.name for r in RULES] == rules  # "attention" places it
    assert memory.changes(prelu_net()).attention == ["prelu1", "prelu2"]
    TWINS.pop()
    record("counted_prelus", str)
    add_twin(Twin(keras.layers.PReLU, CountingPReLU, "lean_attention", "counted_prelus"),
             after="norms")
    names = [r.name for r in RULES]
    assert names[names.index("norms") + 1] == "counted_prelus"


def test_a_row_is_refused_twice_under_another_option_or_without_its_record(tables):
    record("counted_prelus", str)
    with pytest.raises(ValueError, match="BatchNormalization takes InplaceBatchNormalization"):
        add_twin(Twin(keras.layers.BatchNormalization, CountingPReLU, "inplace_norm",
                      "counted_prelus"))
    with pytest.raises(ValueError, match="'norms' places the record 'inplace' under "
                                         "inplace_norm, not lean_attention"):
        add_twin(Twin(keras.layers.PReLU, CountingPReLU, "lean_attention", "inplace"))
    with pytest.raises(ValueError, match="declare the record 'prelus' first"):
        add_twin(Twin(keras.layers.PReLU, CountingPReLU, "lean_attention", "prelus"))
    with pytest.raises(ValueError, match="unknown rewrite option 'lean_atention'"):
        add_twin(Twin(keras.layers.PReLU, CountingPReLU, "lean_atention", "counted_prelus"))
    assert TWINS[-1].stock is not keras.layers.PReLU  # none was added


def test_each_one_for_one_rule_places_the_rows_of_its_record():
    """The table's rows, by the rule that places them (the set and order of the rules
    is `test_rules.py`'s)."""
    placing = {r.name: r.find.record for r in RULES if hasattr(r.find, "record")}
    assert placing == {"norms": "inplace", "layer_norms": "layer_norms",
                       "attention": "attention", "lean_dilated": "lean"}
    by_record = {}
    for row in TWINS:
        by_record.setdefault(row.record, []).append(row.stock.__name__)
    assert by_record == {
        "inplace": ["BatchNormalization", "GroupNormalization"],
        "layer_norms": ["LayerNormalization", "RMSNormalization"],
        "attention": ["MultiHeadAttention"], "lean": ["DepthwiseConv2D"]}
