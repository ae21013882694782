"""The .tflite (LiteRT) file: a fixed input size, as mobile runtimes want, and the weights
in float32, float16 or int8 (``--tflite_quantization``).

An image of another size is never stretched to it: predict pads a smaller one and runs a
larger one in overlapping windows, averaging the ``logits`` output's probabilities as
``--eval_mode=sliding`` does (``tfseg.deploy.windows``), which is why every .tflite has
that output; docs/export.md shows a client how. Its classes are a
buffer of the model's ``metadata`` named ``tfseg_labels`` (``tfseg.deploy.labels``), read
with TF's own flatbuffer schema.

Example::

    interpreter = tf.lite.Interpreter("export/model.tflite")
    classes = interpreter.get_signature_runner()(image=uint8_image)["classes"]
"""

import dataclasses
import math
import os
import struct
import warnings

import numpy as np
import tensorflow as tf

from tfseg.deploy import labels
from tfseg.deploy.fits import INPUT_BYTES_PER_PIXEL, peak_live_bytes, require_fits
from tfseg.deploy.registry import labelled, register, require_exported, runner
from tfseg.deploy.serving import (INPUT, LOGITS, converter_failed, frozen_function,
                                  serving_function)
from tfseg.deploy.windows import stride_for, windowed
from tfseg.errors import InputError
from tfseg.runtime.notes import kept_from_stderr

TFLITE_FILE = "model.tflite"


def _quantize(converter, request):
    """Sets ``converter``'s optimisations for ``request.quantization``."""
    kind = request.quantization
    if kind == "none":
        return
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if kind == "float16":
        converter.target_spec.supported_types = [tf.float16]
    elif kind == "int8":
        # Activations too, their ranges from real images; the uint8 input and int32
        # output keep their types, so the signature is the float model's.
        def representative():
            for image in request.calibration():
                yield {INPUT: np.asarray(image, np.uint8)}
        converter.representative_dataset = representative


def convert(model, request):
    """The .tflite bytes of ``model`` at ``request.size``, with the ``logits`` output
    whatever ``request.logits`` says: windows over a larger image average them.

    Raises:
      InputError: the converter failed (one line naming the format and the op).
    """
    serve = frozen_function(model, request.input_shape(fixed=True), True, request.sizes)
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [serve.get_concrete_function()], tf.Module())
    _quantize(converter, request)
    try:
        with kept_from_stderr():  # its notes of a conversion that worked (runtime/notes.py)
            return converter.convert()
    except Exception as error:  # the converter raises ConverterError and others
        raise converter_failed("tflite", error) from None


def fits_here(model, request):
    """Refuses, before anything is written, an export size whose conversion would not fit
    in this machine's memory (``tfseg.deploy.fits``): freezing the graph allocates the
    input (3 bytes a pixel); int8 calibration also runs the model at that size, its
    activations the serving graph's peak of live tensors (traced there, not run)."""
    multiple = request.sizes.size_multiple
    require_fits(request.size, INPUT_BYTES_PER_PIXEL, multiple)
    if request.quantization == "int8":
        graph = serving_function(model, request.input_shape(fixed=True), request.logits,
                                 request.sizes).get_concrete_function().graph
        require_fits(request.size, peak_live_bytes(graph) / math.prod(request.size), multiple)


@register("tflite", entries=(TFLITE_FILE,), fits=fits_here)
def write(model, folder, request):
    with open(os.path.join(folder, TFLITE_FILE), "wb") as f:
        f.write(convert(model, request))
    height, width = request.size
    weights = request.quantization if request.quantization != "none" else "float32"
    outputs = dataclasses.replace(request, logits=True).outputs()
    return (f"{TFLITE_FILE} ({weights}; signature serving_default: uint8 {INPUT} "
            f"[1,{height},{width},3] -> {outputs})")


def check(path):
    """Refuses a .tflite that is not whole, before a runtime opens it: TF's interpreter
    reads the file's flatbuffer unchecked and a file cut short (a half-finished copy or
    download) kills the process (a segmentation fault). TF's own pure-Python reader
    (`tensorflow.lite.tools.flatbuffer_utils`) reads every table and vector of the
    schema, and fails, in Python, on any that reaches past the end; buffers stored
    after the flatbuffer (files over 2 GB) are checked against the file's size.

    Raises:
      InputError: one line naming the file and what is wrong with it.
    """
    from tensorflow.lite.tools import flatbuffer_utils

    def refuse(why):
        return InputError(f"--model_path: {path} is not a whole .tflite file ({why}); "
                          f"export it again")

    with open(path, "rb") as f:
        data = bytearray(f.read())
    if data[4:8] != b"TFL3":
        raise refuse("no TFLite identifier: empty, cut short or another format")
    try:
        model = flatbuffer_utils.convert_bytearray_to_object(data)
    except Exception:  # struct.error, IndexError, ValueError: a part out of bounds
        raise refuse("cut short or damaged: a part of it reaches past its end") from None
    if any(b.offset and b.offset + b.size > len(data) for b in model.buffers or ()):
        raise refuse("cut short: its weights end past the file's end")
    if not model.signatureDefs:
        raise refuse("no signature: not a tfseg export")


def _tensors(details):
    """{name: (dtype name, shape)} of a signature runner's input or output details (a side
    of any size, -1 in the file: None)."""
    return {name: (np.dtype(d["dtype"]).name, tuple(None if n < 0 else int(n)
                                                  for n in d["shape_signature"]))
            for name, d in details.items()}


def runs(path, signature):
    """Runs ``signature`` (a signature runner of the file at ``path``) once on a zero image
    of its input's size, before any real image: a file that is whole but damaged inside
    (an operator naming a tensor that does not exist) passed `check` and raised
    ``RuntimeError: Invalid tensor index ...`` at the first image, with its traceback.

    Raises:
      InputError: one line naming the file and the runtime's error.
    """
    shape = signature.get_input_details()[INPUT]["shape"]
    try:
        signature(**{INPUT: np.zeros(shape, np.uint8)})
    except Exception as error:  # the interpreter's RuntimeError, ValueError
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise InputError(f"--model_path: {path} is a damaged .tflite file (it does not run "
                         f"on a zero image: {first[:200]}); export it again") from None


def interpreter(path, **kwargs):
    """TF's `tf.lite.Interpreter` of the file at `path`. Its six-line deprecation warning
    (LiteRT's `ai_edge_litert` is its successor) is not shown: TF 2.21, which tfseg pins,
    has the interpreter, and the lines came before every prediction's output."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"\s*Warning: tf.lite.Interpreter is deprecated",
                                category=UserWarning)
        return tf.lite.Interpreter(model_path=path, **kwargs)


@runner("tflite", accepts=lambda path: path.endswith(".tflite") and os.path.isfile(path))
def open_file(path):
    """Class ids at the image's size: an image of another size than the file's padded
    and run in windows (``tfseg.deploy.windows``), never stretched; ``note`` says so. The
    file is checked first (`check`), then its signature (``registry.require_exported``),
    then run once on a zero image (`runs`)."""
    check(path)
    signature = interpreter(path).get_signature_runner()
    require_exported(path, _tensors(signature.get_input_details()),
                     _tensors(signature.get_output_details()))
    runs(path, signature)
    size = tuple(int(n) for n in signature.get_input_details()[INPUT]["shape"][1:3])

    def classify(image):
        return windowed(lambda x: signature(**{INPUT: x}), size, image)

    stride = stride_for(size)
    classify.note = (f"it takes {size[0]}x{size[1]}: an image of another size is padded "
                     f"and run in windows every {stride[0]}x{stride[1]} pixels, as "
                     f"--eval_mode=sliding --eval_crop={size[0]},{size[1]} does"
                     + ("" if LOGITS in signature.get_output_details() else
                        "; this file has no logits to average (exported before tfseg "
                        "added them): each pixel's class is its deepest window's"))
    return classify


def write_labels(path, text):
    """Adds ``text`` as the buffer of a ``metadata`` entry named ``labels.NAME`` (TFLite's
    own place for a model's extra data, where tflite_support keeps its own)."""
    from tensorflow.lite.python import schema_py_generated as schema
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model(path)
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(text.encode(), np.uint8)
    model.buffers.append(buffer)
    entry = schema.MetadataT()
    entry.name, entry.buffer = labels.NAME, len(model.buffers) - 1
    model.metadata = [m for m in model.metadata or () if m.name != labels.NAME.encode()]
    model.metadata.append(entry)
    flatbuffer_utils.write_model(model, path)


def read_labels(path):
    """The text of the ``labels.NAME`` metadata buffer, None where there is none; read
    lazily, without unpacking the weights."""
    from tensorflow.lite.python import schema_py_generated as schema

    with open(path, "rb") as f:
        data = f.read()
    try:
        model = schema.Model.GetRootAsModel(data, 0)
        for i in range(model.MetadataLength()):
            entry = model.Metadata(i)
            if entry.Name() == labels.NAME.encode():
                buffer = model.Buffers(entry.Buffer())
                if buffer.Offset() > 1:  # stored after the flatbuffer (files over 2 GB)
                    return data[buffer.Offset():buffer.Offset() + buffer.Size()].decode()
                return bytes(buffer.DataAsNumpy().tobytes() if buffer.DataLength() else
                             b"").decode()
    except (struct.error, IndexError, AttributeError) as error:  # a part out of bounds
        raise ValueError(f"damaged: {error}") from None
    return None


labelled("tflite", write=write_labels, read=read_labels)
