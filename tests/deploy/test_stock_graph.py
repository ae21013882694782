"""An export holds only stock ops, whatever the training used: no custom gradient of the
memory-saving twins in the SavedModel's graph, and no twin class in model.keras, from a
memory-saving, a class-sharded (--class_shards) and a split (--model_devices) run."""

import json
import zipfile

import pytest

from tests.split.test_place import on_devices
from tests.train.conftest import TINY_FLAGS, run_main
from tfseg.deploy import Request, keras_file, saved_model
from tfseg.models import deeplab_v3_plus

# Not a twin: the stock model's own resize layer (tfseg.layers.ResizeLike).
STOCK_TFSEG_CLASSES = {"ResizeLike"}


def custom_gradient_ops(folder):
    """The nodes of the SavedModel in ``folder`` (its graph and every function) that
    ``tf.custom_gradient`` leaves: an op tagged with a ``_gradient_op_type``
    ("CustomGradient-N", an IdentityN), and each gradient the file registers."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    with open(folder / "saved_model.pb", "rb") as f:
        proto.ParseFromString(f.read())
    found = []
    for graph in (meta.graph_def for meta in proto.meta_graphs):
        nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
        found += [f"{n.op} {n.attr['_gradient_op_type'].s.decode()}" for n in nodes
                  if "_gradient_op_type" in n.attr or n.op == "IdentityN"]
        found += [g.registered_op_type for g in graph.library.registered_gradients]
    return found


def twin_classes(path):
    """The tfseg classes of the layers in model.keras ``path``'s config, but for
    ``STOCK_TFSEG_CLASSES``."""
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
    found = []

    def walk(node):
        if isinstance(node, dict):
            name = str(node.get("registered_name") or "")
            if name.startswith("tfseg>") or str(node.get("module", "")).startswith("tfseg"):
                if node.get("class_name") not in STOCK_TFSEG_CLASSES:
                    found.append(node.get("class_name"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(config)
    return found


@pytest.mark.slow
def test_the_checks_find_a_twins_custom_gradient_and_class(tmp_path):
    """The two checks see what they look for: a memory-saving model written as the
    formats write a model has both; the stock model neither."""
    for memory_saving in (False, True):
        model = deeplab_v3_plus(5, width_multiplier=0.125, middle_repeats=1,
                                memory_saving=memory_saving)
        folder = tmp_path / str(memory_saving)
        folder.mkdir()
        saved_model.write(model, str(folder), Request())
        keras_file.write(model, str(folder), Request())
        ops = custom_gradient_ops(folder / "saved_model")
        twins = twin_classes(folder / "model.keras")
        if memory_saving:
            assert ops and all("CustomGradient" in op or "IdentityN" in op for op in ops)
            assert "ReluDepthwiseConv2D" in twins, twins
        else:
            assert ops == [] and twins == []


def _train_and_export(data_dir, model_dir, flags, devices=0):
    args = (f"--data_dir={data_dir}", f"--model_dir={model_dir}", *TINY_FLAGS, *flags)
    if devices:  # logical CPU devices: a fresh process that sets them first
        proc = on_devices(devices, "main", "--mode=train", "--train_steps=1", *args,
                          timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
    else:
        run_main("--mode=train", "--train_steps=1", *args)
    # The training flags again, as a user re-running the recipe with --mode=export would.
    run_main("--mode=export", "--export_format=saved_model,keras", *args)
    return model_dir / "export"


@pytest.mark.slow
@pytest.mark.timeout(900)  # a fresh process for the split run, on a busy machine
@pytest.mark.parametrize("flags,devices", [
    (("--memory_saving", "--recompute=middle"), 0),
    pytest.param(("--class_shards=4", "--memory_saving"), 0, marks=pytest.mark.full),
    pytest.param(("--model_devices=CPU:0,CPU:1", "--memory_saving"), 2, marks=pytest.mark.full),
], ids=["memory_saving", "class_shards", "model_devices"])
def test_exports_of_twin_trained_runs_hold_only_stock_ops(data_dir, tmp_path, flags, devices):
    export = _train_and_export(data_dir, tmp_path / "run", flags, devices)
    assert custom_gradient_ops(export / "saved_model") == []
    assert twin_classes(export / "model.keras") == []
