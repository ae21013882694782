"""The .onnx file, by tf2onnx (the ``export`` extra): any image size, opset ``OPSET``.

Opset 13 is read by every maintained runtime (onnxruntime >= 1.6, TensorRT >= 7.2,
OpenVINO, ONNX.js / onnxruntime-web) and holds every op of the model (Resize with
half_pixel or align_corners, ArgMax).

Its classes are in the model's ``metadata_props`` under ``tfseg_labels``
(``tfseg.deploy.labels``): ``session.get_modelmeta().custom_metadata_map``.

Example::

    session = onnxruntime.InferenceSession("export/model.onnx")
    classes, = session.run(["classes"], {"image": uint8_image})
"""

import os
import re

from tfseg.deploy import labels
from tfseg.deploy.registry import labelled, register, require_exported, runner
from tfseg.deploy.serving import CLASSES, INPUT, converter_failed, serving_function

ONNX_FILE = "model.onnx"
OPSET = 13


def convert(model, request, path):
    """Writes the ONNX model of ``model`` (height and width dynamic) to ``path``.

    Raises:
      InputError: the converter failed, or left an op ONNX has not (one line naming the
        format and the op).
    """
    import onnx
    import tf2onnx

    serve = serving_function(model, request.input_shape(fixed=False), request.logits,
                             request.sizes)
    try:
        proto, _ = tf2onnx.convert.from_function(serve, input_signature=serve.input_signature,
                                                 opset=OPSET)
        # tf2onnx logs an op it cannot map and leaves it in: the checker names it.
        onnx.checker.check_model(proto)
    except Exception as error:
        raise converter_failed("onnx", error) from None
    # The dynamic sizes by name, not tf2onnx's unk__N.
    for value in list(proto.graph.input) + list(proto.graph.output):
        for axis, dim in zip(("batch", "height", "width"), value.type.tensor_type.shape.dim):
            if dim.dim_param and re.match(r"unk__\d+", dim.dim_param):
                dim.dim_param = axis
    onnx.save(proto, path)


@register("onnx", entries=(ONNX_FILE,), needs=("tf2onnx", "onnx"))
def write(model, folder, request):
    convert(model, request, os.path.join(folder, ONNX_FILE))
    return (f"{ONNX_FILE} (opset {OPSET}; input {INPUT}: uint8 [1,height,width,3] -> "
            f"{request.outputs()})")


@runner("onnx", accepts=lambda path: path.endswith(".onnx") and os.path.isfile(path),
        needs=("onnxruntime", "onnx"))
def open_file(path):
    """Class ids by onnxruntime on the CPU, at the image's size; a model tfseg did not
    export (another input) is refused first (``registry.require_exported``)."""
    import onnxruntime

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    require_exported(path, _tensors(session.get_inputs()), _tensors(session.get_outputs()))
    return lambda image: session.run([CLASSES], {INPUT: image})[0]


def _tensors(args):
    """{name: (dtype name, shape)} of onnxruntime's ``NodeArg``s ("tensor(float)":
    float32; a named or unknown side: None)."""
    def dtype(kind):
        name = kind.removeprefix("tensor(").removesuffix(")")
        return {"float": "float32", "double": "float64"}.get(name, name)
    return {arg.name: (dtype(arg.type), tuple(n if isinstance(n, int) else None
                                              for n in arg.shape or ()))
            for arg in args}


def write_labels(path, text):
    import onnx

    proto = onnx.load(path)
    kept = [p for p in proto.metadata_props if p.key != labels.NAME]
    del proto.metadata_props[:]
    proto.metadata_props.extend(kept)
    proto.metadata_props.add(key=labels.NAME, value=text)
    onnx.save(proto, path)


def read_labels(path):
    import onnx

    try:
        proto = onnx.load(path, load_external_data=False)
    except Exception as error:  # protobuf's DecodeError is no ValueError
        raise ValueError(f"not an ONNX model: {error}") from None
    return next((p.value for p in proto.metadata_props if p.key == labels.NAME), None)


labelled("onnx", write=write_labels, read=read_labels)
