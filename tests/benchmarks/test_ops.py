"""benchmarks/ops.py: op counts of the traced training step per variant, and what it counts
(the graph's own ops and, once each, the functions it calls)."""

import json
import os
import sys

import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import ops  # noqa: E402  (beside benchmarks/gpu.py, not a package)


def test_a_conds_branches_count_as_function_ops_once_each():
    @tf.function
    def f(x):
        y = tf.cond(x > 0, lambda: x * 2.0, lambda: x - 1.0)
        return tf.cond(x > 1, lambda: y, lambda: -y)

    graph = f.get_concrete_function(tf.constant(1.0)).graph
    counts = ops.count_ops(graph)
    assert counts["graph_ops"] == len(graph.get_operations())
    assert counts["functions"] == 4  # two conds, two branches each
    assert counts["function_ops"] > 0
    assert counts["total_ops"] == counts["graph_ops"] + counts["function_ops"]
    assert sum(counts["by_type"].values()) == counts["total_ops"]
    assert sum(counts["by_unit"].values()) == counts["total_ops"]
    assert counts["by_type"]["StatelessIf"] == 2


def test_live_ops_leave_out_what_no_output_or_state_needs():
    v = tf.Variable(1.0)

    @tf.function
    def f(x):
        tf.zeros([3]) + 1.0  # dead: nothing reads it
        v.assign_add(x)  # stateful: runs though nothing reads it
        return x * 2.0

    graph = f.get_concrete_function(tf.constant(1.0)).graph
    names = {op.type for op in ops.live(graph)}
    assert not {"Fill", "AddV2"} & names
    assert {"AssignAddVariableOp", "Mul"} <= names
    counts = ops.count_ops(graph)
    assert counts["live_ops"] < counts["total_ops"]
    assert counts["live_ops"] == len(ops.live(graph))


def test_an_op_belongs_to_its_deepest_layers_unit_forward_and_backward():
    layers = {"deeplab_v3_plus", "exit_block2_sepconv3_depthwise_recompute",
              "exit_block2_sepconv3_depthwise_bn", "aspp_branches"}
    for name in ("deeplab_v3_plus_1/exit_block2_sepconv3_depthwise_recompute_1/"
                 "exit_block2_sepconv3_depthwise_bn_1/mul",
                 "gradient_tape/deeplab_v3_plus_1/exit_block2_sepconv3_depthwise_bn_1/Neg"):
        assert ops.unit_of(name, layers - {"deeplab_v3_plus"}) == "exit_block2_sepconv3"
    assert ops.unit_of("sgd_1/SelectV2_3", layers) == "sgd"
    assert ops.unit_of("Const_159", layers) == "(top)"


@pytest.mark.parametrize("argv", [["--size=9,9"], ["--size=65"], ["--variants=recompute"],
                                  ["--variants=stock,bogus"], ["--batch=-1"]])
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        ops.parse(["--cpu", *argv])
    assert exit_.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_size_the_model_cannot_take_exits_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        ops.main(["--cpu", "--size=33,35", "--variants=stock"])
    assert exit_.value.code == 2
    assert "does not fit output stride" in capsys.readouterr().err


@pytest.mark.slow  # two traces of the tiny model: ~25 s on 2 cores
def test_the_tiny_steps_are_counted_and_memory_saving_has_more_ops(capsys):
    summary = ops.main(["--cpu", "--size=33,49", "--variants=stock,memory_saving", "--top=3"])
    out = capsys.readouterr().out
    assert json.loads(out.strip().splitlines()[-1]) == summary
    assert summary["size"] == [33, 49] and summary["width_multiplier"] == 0.25
    stock, saving = summary["counts"]["stock"], summary["counts"]["memory_saving"]
    for counts in (stock, saving):
        assert counts["graph_ops"] > 1000
        assert counts["total_ops"] == counts["graph_ops"] + counts["function_ops"]
    # The default guard (tfseg.training.step) applies the update in a cond: its two
    # branches are function bodies, counted once each.
    assert stock["functions"] == saving["functions"] > 0
    ratio = summary["ratio_to_stock"]["memory_saving"]
    assert ratio == pytest.approx(saving["total_ops"] / stock["total_ops"], abs=1e-4)
    assert ratio > 1
    assert saving["live_ops"] <= saving["total_ops"]
    assert "memory_saving - stock, by unit:" in out
