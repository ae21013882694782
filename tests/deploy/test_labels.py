"""tfseg.deploy.labels: every format stores the class names, palette, ignore label and
training run in its own place, read back by the format's own tools, and the file still
runs and loads as before."""

import json
import os
import zipfile

import keras
import numpy as np
import pytest

from tests.extras import needs
from tfseg.deploy import EXPORTERS, Request, labels, open_model, read_labels
from tfseg.errors import InputError

ONNX = needs("export", "tf2onnx", "onnx", "onnxruntime").marks
FORMATS = ["saved_model", "keras", "tflite", pytest.param("onnx", marks=ONNX)]
LABELS = labels.Labels(("sky", "road", "car"), np.array([[0, 0, 255], [128, 64, 128],
                                                         [0, 0, 142]], np.uint8),
                       run={"checkpoint": "/runs/try/ckpt-6", "step": 6})


@pytest.fixture(scope="module")
def tiny():
    """A 3-class 'segmenter' of any input size."""
    return keras.Sequential([keras.Input((None, None, 3)), keras.layers.Conv2D(3, 1)])


def _written(tiny, folder, name):
    """The path of format ``name``'s entry, written into ``folder`` without labels."""
    exporter = EXPORTERS[name]
    exporter.write(tiny, str(folder), Request(size=(8, 8)))
    return exporter, os.path.join(folder, exporter.entries[0])


@pytest.mark.parametrize("name", FORMATS)
def test_each_format_carries_its_labels_and_still_runs(tiny, tmp_path, name):
    exporter, path = _written(tiny, tmp_path, name)
    assert read_labels(path) is None  # a file exported before tfseg stored them
    labels.write(exporter, str(tmp_path), LABELS)
    got = read_labels(path)
    assert got.text() == LABELS.text() and got.num_classes == 3 and got.ignore_label == 255
    np.testing.assert_array_equal(got.palette, LABELS.palette)
    if exporter.open is not None:  # predict runs it: its classes come with it
        classify = open_model(path)
        assert classify(np.zeros((1, 8, 8, 3), np.uint8)).shape == (1, 8, 8)
        assert classify.labels.class_names == LABELS.class_names


def test_the_formats_own_tools_read_the_labels(tiny, tmp_path):
    """Where a client finds them, with no tfseg: a SavedModel's assets, the .keras zip
    (which Keras still loads), the .tflite's metadata through TF's flatbuffer schema."""
    from tensorflow.lite.tools import flatbuffer_utils

    for name in ("saved_model", "keras", "tflite"):
        exporter, _ = _written(tiny, tmp_path, name)
        labels.write(exporter, str(tmp_path), LABELS)
    with open(tmp_path / "saved_model" / "assets" / "tfseg_labels.json") as f:
        assert json.load(f)["class_names"] == ["sky", "road", "car"]
    with zipfile.ZipFile(tmp_path / "model.keras") as archive:
        assert json.loads(archive.read("tfseg_labels.json"))["ignore_label"] == 255
    assert keras.models.load_model(tmp_path / "model.keras").output_shape[-1] == 3
    model = flatbuffer_utils.read_model(str(tmp_path / "model.tflite"))
    entry = next(m for m in model.metadata if m.name == b"tfseg_labels")
    stored = json.loads(bytes(model.buffers[entry.buffer].data))
    assert stored["run"] == {"checkpoint": "/runs/try/ckpt-6", "step": 6}


@needs("export", "tf2onnx", "onnx", "onnxruntime")
def test_onnxruntime_reads_the_onnx_files_labels(tiny, tmp_path):
    import onnxruntime

    exporter, path = _written(tiny, tmp_path, "onnx")
    labels.write(exporter, str(tmp_path), LABELS)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    stored = json.loads(session.get_modelmeta().custom_metadata_map["tfseg_labels"])
    assert stored["class_names"] == ["sky", "road", "car"]


@pytest.mark.parametrize("text, why", [
    ("{not json", "are not JSON"),
    ('{"class_names": ["a", "b"], "palette": [[0, 0, 0]]}', "palette is not one"),
    ('{"palette": []}', "have no list of class_names"),
])
def test_damaged_labels_are_one_line_naming_the_file(tiny, tmp_path, text, why):
    exporter, path = _written(tiny, tmp_path, "keras")
    exporter.write_labels(path, text)
    with pytest.raises(InputError) as error:
        read_labels(path)
    message = str(error.value)
    assert message.startswith(f"--model_path: {path}: its tfseg_labels {why}")
    assert message.endswith("; export it again") and "\n" not in message
