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


def _xla_op(plane, line, module, begin, duration):
    """An XLA op's event, as XLA's runtime writes it: `hlo_op` and `hlo_module` stats."""
    ids = {m.name: i for i, m in plane.stat_metadata.items()}
    event = line.events.add(metadata_id=1, offset_ps=begin, duration_ps=duration)
    event.stats.add(metadata_id=ids["hlo_op"], str_value="fusion.3")
    event.stats.add(metadata_id=ids["hlo_module"], str_value=module)


def _plane(space, name):
    plane = space.planes.add(name=name)
    plane.stat_metadata[1].name, plane.stat_metadata[2].name = "hlo_op", "hlo_module"
    plane.event_metadata[1].name = "fusion.3"
    return plane


def test_xla_time_is_grouped_by_block_forward_and_backward_apart():
    """The module names TF 2.21 gave `tfseg.xla.Blocks`' computations in a real trace."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    plane = _plane(space, "/host:CPU")
    line = plane.lines.add(name="tf_Compute/1", timestamp_ns=0)
    _xla_op(plane, line, "a_forward_block_entry_stem_18975__.1", 0, 2000)
    _xla_op(plane, line, "a_forward_block_middle_unit1_16388__.1", 3000, 1000)
    _xla_op(plane, line, "a_forward_block_middle_unit1_16388__.1", 4000, 1000)
    _xla_op(plane, line, "a_inference_update_kept_23299__.1", 6000, 9000)  # no block's
    _xla_op(plane, line, "a_inference___backward_block_middle_unit1_1_16389__.4", 20000, 7000)
    _xla_op(plane, line, "a_inference___backward_block_entry_stem_1_18976__.9", 30000, 3000)

    grouped = timeline.by_block(space)
    assert list(grouped) == ["entry_stem", "middle_unit1"]  # the order they first ran
    assert grouped["middle_unit1"] == {"forward": 2e-9, "backward": 7e-9}
    assert grouped["entry_stem"] == {"forward": 2e-9, "backward": 3e-9}
    assert timeline.summarize(space)["by_block"] == grouped


def test_on_a_gpu_the_blocks_kernels_are_counted_not_the_hosts_events():
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    host = _plane(space, "/host:CPU")
    _xla_op(host, host.lines.add(name="launch"), "a_forward_block_aspp_7__.1", 0, 5000)
    gpu = _plane(space, "/device:GPU:0")
    _xla_op(gpu, gpu.lines.add(name="Stream #1"), "a_forward_block_aspp_7__.1", 0, 1000)
    assert timeline.by_block(space) == {"aspp": {"forward": 1e-9, "backward": 0.0}}


def test_a_module_is_named_by_its_block_or_none():
    assert timeline.block_of("a_inference___backward_block_exit_block2_13409_14880__.40") == (
        "exit_block2", "backward")
    assert timeline.block_of("a_forward_block_decoder_11828__.1") == ("decoder", "forward")
    assert timeline.block_of("a_inference_block_aspp_12__.3") == ("aspp", "forward")
    for other in ("a_inference___backward_loss_10256_10322__.5", "a_inference_bad_20523__.172",
                  "a_inference_train_step_99__.1"):
        assert timeline.block_of(other) is None, other
