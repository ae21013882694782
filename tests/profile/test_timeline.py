"""One step under TensorFlow's profiler, summed by op type (tfseg/profile/timeline.py):
on this CPU, the host's side of it, from a real trace of tfseg's training step."""

from tfseg.profile import child, timeline
from tfseg.profile.step import StepConfig, build_step

def test_a_training_step_is_summed_by_op_type(tmp_path):
    config = StepConfig.of(num_classes=5, height=33, width=49,
                           batch=2, width_multiplier=0.125, middle_repeats=1)
    strategy, _, _, step = build_step(config)
    batch = child.sample_batch(config, strategy)
    float(step(batch)[0])  # traced outside the profile

    summary = timeline.profile(lambda: float(step(batch)[0]), str(tmp_path), top=200)

    assert summary["device"] is None  # no GPU plane on the CPU
    host = summary["host"]
    kinds = {kind: (seconds, count) for kind, seconds, count in host["by_type"]}
    # The separable convs' depthwise halves, forward and both gradients, ran as ops.
    assert any("DepthwiseConv2dNative" in kind for kind in kinds), sorted(kinds)
    assert any("BackpropFilter" in kind for kind in kinds), sorted(kinds)
    assert host["ops"] == sum(count for _, count in kinds.values()) > 100
    # The executor's ops fit in the step's wall time on its 2 threads (self times:
    # test_self_times_leave_an_enclosing_op_its_own_time).
    assert 0 < host["op_seconds"] <= 2 * summary["wall_seconds"]
    assert all(seconds >= 0 for seconds, _ in kinds.values())

def test_self_times_leave_an_enclosing_op_its_own_time():
    # A cond (0-10) runs two ops (2-5, 6-9) inside it; a last op runs after it.
    events = [(0, 10, "If"), (2, 3, "Conv2D"), (6, 3, "Relu"), (12, 1, "AddV2")]
    assert timeline.self_times(events) == [("If", 4), ("Conv2D", 3), ("Relu", 3),
                                           ("AddV2", 1)]

def test_union_counts_overlapping_kernels_once():
    # Two streams: 0-4 and 2-6 overlap; 8-9 stands alone.
    assert timeline.union_ps([(2, 6), (0, 4), (8, 9)]) == 7

def test_ranked_keeps_the_longest_and_sums_the_rest():
    totals = {"a": (5, 1), "b": (9, 2), "c": (1, 1), "d": (2, 3)}
    rows = timeline.ranked(totals, top=2)
    assert [r[0] for r in rows] == ["b", "a", "(other)"]
    assert rows[-1][2] == 4 and abs(rows[-1][1] - 3e-12) < 1e-24

def test_a_kernel_is_named_by_the_op_that_launched_it():
    """CUPTI's `tf_op` stat is a reference to a stat metadata named "name:Type"."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/device:GPU:0")
    plane.stat_metadata[1].name = "tf_op"
    plane.stat_metadata[2].name = "model/aspp/depthwise:DepthwiseConv2dNative"
    plane.event_metadata[7].name = "void tensorflow::DepthwiseConv2dGPUKernelNHWC<float>"
    plane.event_metadata[8].name = "cudnn::gemm"
    line = plane.lines.add(name="Stream #14(Kernel)", timestamp_ns=1)
    launched = line.events.add(metadata_id=7, offset_ps=0, duration_ps=4000)
    launched.stats.add(metadata_id=1, ref_value=2)
    line.events.add(metadata_id=8, offset_ps=2000, duration_ps=4000)
    # An XLA kernel: its HLO op names it (its tf_op is the whole compiled cluster's).
    plane.stat_metadata[3].name = "hlo_op"
    plane.event_metadata[9].name = "loop_fusion_kernel"
    xla = line.events.add(metadata_id=9, offset_ps=10000, duration_ps=1000)
    xla.stats.add(metadata_id=3, str_value="fusion.12")
    xla.stats.add(metadata_id=1, ref_value=2)

    device = timeline.summarize(space)["device"]
    assert device["kernels"] == 3 and abs(device["busy_seconds"] - 7e-9) < 1e-18
    assert [row[0] for row in device["by_type"]] == ["DepthwiseConv2dNative",
                                                    "(kernel) cudnn::gemm", "XLA fusion"]

def test_profile_without_a_trace_names_the_folder(tmp_path):
    try:
        timeline.newest_space(str(tmp_path))
    except FileNotFoundError as error:
        assert str(tmp_path) in str(error)
    else:
        raise AssertionError("no trace, no error")

