"""What every export format computes: uint8 RGB in, int32 class ids (and optionally the
logits) out, with the normalisation inside, so that clients send raw pixels; and, as
eval does, each image padded to a size the model maps exactly and the outputs cropped
back (``tfseg.evaluation.inference.padded_pass``), so that any input size is exact.

Example::

    request = Request(size=(97, 129), logits=True, sizes=InferenceConfig(size_multiple=16))
    fn = serving_function(model, request.input_shape(fixed=True), request.logits,
                          request.sizes)
    fn(tf.zeros([1, 97, 129, 3], tf.uint8))["classes"].shape  # (1, 97, 129); ran at 112x144
"""

import dataclasses
import re
from typing import Callable, Optional, Tuple

import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import \
    convert_variables_to_constants_v2

from tfseg.errors import InputError
from tfseg.evaluation.inference import InferenceConfig, padded_pass
from tfseg.models import normalize

INPUT = "image"
CLASSES = "classes"
LOGITS = "logits"


@dataclasses.dataclass(frozen=True)
class Request:
    """What the formats are asked to write.

    Attributes:
      size: (height, width) of the fixed-size formats' input (TFLite).
      logits: also output float32 logits [1, H, W, C] as ``logits``.
      quantization: the .tflite's (``--tflite_quantization``).
      calibration: ``calibration()`` yields uint8 [1, H, W, 3] images of ``size``
        (``--tflite_quantization=int8`` only reads it).
      log: progress lines.
      sizes: the input sizes the model maps exactly (``size_multiple`` and
        ``size_plus_one`` of an ``InferenceConfig``, as ``inference_config`` of
        tfseg/evaluation/evaluate.py sets them for eval); the default pads nothing.
    """

    size: Tuple[int, int] = (129, 129)
    logits: bool = False
    quantization: str = "none"
    calibration: Optional[Callable] = None
    log: Callable = print
    sizes: InferenceConfig = InferenceConfig()

    def input_shape(self, fixed):
        return [1, *self.size, 3] if fixed else [1, None, None, 3]

    def outputs(self):
        """The phrase naming the outputs, for the export's log line."""
        return f"int32 {CLASSES} [1,H,W]" + (f", float32 {LOGITS} [1,H,W,C]" if self.logits
                                              else "")


def serving_function(model, shape, logits=False, sizes=InferenceConfig()):
    """A ``tf.function`` of uint8 ``image`` [``shape``] -> {"classes": int32 [1, H, W]}
    (and "logits": float32 [1, H, W, C] if ``logits``), the model in inference mode, run
    on the normalised image padded with 0 up to the next size ``sizes`` maps exactly
    (``InferenceConfig.pass_size``; in the graph where ``shape`` leaves H, W unknown)."""
    @tf.function(input_signature=[tf.TensorSpec(shape, tf.uint8, name=INPUT)])
    def serve(image):
        scores = padded_pass(lambda x: model(x, training=False), normalize(image), sizes)
        out = {CLASSES: tf.argmax(scores, -1, output_type=tf.int32)}
        if logits:
            out[LOGITS] = tf.cast(scores, tf.float32)
        return out
    return serve


def frozen_function(model, shape, logits=False, sizes=InferenceConfig()):
    """``serving_function`` with the weights folded in as constants, outputs named as
    there: what TFLite converts. (TF 2.21's converter, given the variables of a Keras 3
    model, from a SavedModel or a concrete function with the model to track, writes a
    file without their values: every output NaN.)"""
    concrete = serving_function(model, shape, logits, sizes).get_concrete_function()
    names = sorted(concrete.structured_outputs)  # a dict flattens in sorted key order
    frozen = convert_variables_to_constants_v2(concrete)

    @tf.function(input_signature=[tf.TensorSpec(shape, tf.uint8, name=INPUT)])
    def serve(image):
        return dict(zip(names, frozen(image)))
    return serve


def resized(image, size):
    """uint8 [1, H, W, 3] ``image`` resized to ``size`` (bilinear, rounded): int8
    calibration's images, whose pixels' statistics are what count, not their shapes."""
    scaled = tf.image.resize(tf.cast(image, tf.float32), size, "bilinear")
    return tf.cast(tf.clip_by_value(tf.round(scaled), 0, 255), tf.uint8).numpy()


def converter_failed(name, error):
    """The one-line InputError of a converter's ``error``: the format, the op it names
    (TF's 'tf.Op' / tf2onnx's 'No Op registered for Op'), and the line that names it
    (else the error's first line)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [repr(error)]
    pattern = re.compile(r"'(tfl?\.\w+)' op|No Op registered for (\w+)")
    for line in lines:
        found = pattern.search(line)
        if found:
            op = next(g for g in found.groups() if g)
            detail = line[found.start():]
            return InputError(f"--export_format={name}: the converter failed on op {op}: "
                              f"{detail[:300]}")
    return InputError(f"--export_format={name}: the converter failed: {lines[0][:300]}")
