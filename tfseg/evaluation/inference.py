"""Class probabilities for whole images: one pass, sliding window, or multi-scale with flips."""

import dataclasses
from typing import Tuple

import tensorflow as tf

from tfseg.models import normalize


@dataclasses.dataclass(frozen=True)
class InferenceConfig:
    """How a whole image is turned into class probabilities.

    Attributes:
      mode: "whole" (one pass), "sliding" (``crop`` windows every ``stride``
        pixels, probabilities averaged where they overlap) or "multiscale"
        (each of ``scales``, and its left-right flip if ``flip``; every pass is
        whole-image and the probabilities are averaged at the input size).
      size_multiple, size_plus_one: the input sizes the model maps exactly: k *
        output stride for its ``half_pixel`` resizes, k * output stride + 1 for
        ``align_corners`` (``inference_config`` in evaluate.py sets them from the
        run). Each pass's input (a whole image, a window, a scaled image) is padded
        with 0 at the bottom and right up to the next such size, and its
        probabilities cropped back. At another size the model's upsampled features
        land up to a feature cell off the pixels they describe, which costs much of
        the mIoU (docs/evaluation.md). 1, False: every input as it is.
    """

    mode: str = "whole"
    crop: Tuple[int, int] = (513, 513)
    stride: Tuple[int, int] = (342, 342)
    scales: Tuple[float, ...] = (1.0,)
    flip: bool = False
    size_multiple: int = 1
    size_plus_one: bool = False

    def pass_size(self, size, maximum=max):
        """The smallest size >= ``size`` that the model maps exactly (see the class).
        ``size`` may be a scalar tensor (a graph's dynamic shape), with ``tf.maximum``."""
        extra = int(self.size_plus_one)
        # A ceiling by a floor of non-negative numbers: an exported graph's FloorDiv
        # becomes ONNX's Div, which truncates.
        cells = maximum((size - extra + self.size_multiple - 1) // self.size_multiple, 1)
        return cells * self.size_multiple + extra


def padded_pass(fn, image, config):
    """``fn(x)[:, :H, :W]``, ``x`` the image [1, H, W, C] padded with 0 at the bottom and
    right up to ``config.pass_size`` (``InferenceConfig``'s docstring says why). H and W
    may be unknown until run (an exported graph's dynamic shape): the padding is then
    computed in the graph.

    Example::

        padded_pass(tf.identity, tf.ones([1, 97, 129, 3]), InferenceConfig(size_multiple=32))
        # shape [1, 97, 129, 3]; tf.identity saw [1, 128, 160, 3]
    """
    height, width, maximum = image.shape[1], image.shape[2], max
    if height is None or width is None:
        height, width, maximum = tf.shape(image)[1], tf.shape(image)[2], tf.maximum
    pad_h = config.pass_size(height, maximum) - height
    pad_w = config.pass_size(width, maximum) - width
    if maximum is tf.maximum or pad_h or pad_w:
        image = tf.pad(image, [[0, 0], [0, pad_h], [0, pad_w], [0, 0]])
    return fn(image)[:, :height, :width]


def window_starts(size, window, stride):
    """Window offsets covering [0, size): every ``stride``, plus one flush with the end."""
    if size <= window:
        return [0]
    starts = list(range(0, size - window + 1, stride))
    if starts[-1] != size - window:
        starts.append(size - window)
    return starts


class Predictor:
    """Softmax probabilities [1, H, W, C] for one uint8 RGB image [1, H, W, 3].

    The image is normalised (``tfseg.models.normalize``) once, where the model
    runs, so only uint8 pixels are copied to the device; windows, scales and
    padding then work on the normalised image (padding 0: the input range's
    mean). ``whole``, ``sliding`` and ``multiscale`` take that normalised float
    image; call the predictor (or ``classes``) with the uint8 one.

    The model runs in a ``tf.function`` with relaxed shapes, so images of new
    sizes (scales, windows, data set images) do not retrace every time. Each pass
    is padded to a size the model maps exactly (``InferenceConfig.pass_size``).
    """

    def __init__(self, model, config=InferenceConfig()):
        self.config = config
        self._softmax = tf.function(lambda x: tf.nn.softmax(model(x, training=False)),
                                    reduce_retracing=True)

    def _forward(self, image):
        """Probabilities of a normalised image [1, H, W, 3], run at ``pass_size``."""
        return padded_pass(self._softmax, image, self.config)

    def whole(self, image):
        return self._forward(image)

    def sliding(self, image):
        height, width = image.shape[1], image.shape[2]
        crop_h, crop_w = self.config.crop
        # Images smaller than a window are padded with 0 (the input range's mean).
        pad_h, pad_w = max(crop_h - height, 0), max(crop_w - width, 0)
        padded = tf.pad(image, [[0, 0], [0, pad_h], [0, pad_w], [0, 0]])
        full_h, full_w = height + pad_h, width + pad_w
        total, counts = None, tf.zeros([1, full_h, full_w, 1])
        for y in window_starts(full_h, crop_h, self.config.stride[0]):
            for x in window_starts(full_w, crop_w, self.config.stride[1]):
                probs = self._forward(padded[:, y:y + crop_h, x:x + crop_w])
                paddings = [[0, 0], [y, full_h - y - crop_h], [x, full_w - x - crop_w], [0, 0]]
                placed = tf.pad(probs, paddings)
                total = placed if total is None else total + placed
                counts += tf.pad(tf.ones([1, crop_h, crop_w, 1]), paddings)
        return (total / counts)[:, :height, :width]

    def multiscale(self, image):
        size = tf.shape(image)[1:3]
        total = 0.0
        passes = 0
        for scale in self.config.scales:
            scaled_size = tf.cast(tf.round(tf.cast(size, tf.float32) * scale), tf.int32)
            scaled = tf.image.resize(image, scaled_size, "bilinear")
            flips = (False, True) if self.config.flip else (False,)
            for flip in flips:
                x = tf.reverse(scaled, [2]) if flip else scaled
                probs = self._forward(x)
                probs = tf.reverse(probs, [2]) if flip else probs
                total += tf.image.resize(probs, size, "bilinear")
                passes += 1
        return total / passes

    def __call__(self, image):
        """Probabilities float32 [1, H, W, C] of a uint8 image [1, H, W, 3].

        Raises TypeError for another dtype: a float image in [-1, 1] (the old
        input) would be normalised again into a near-black one, silently.
        """
        image = tf.convert_to_tensor(image)
        if image.dtype != tf.uint8:
            raise TypeError(f"Predictor takes uint8 RGB images (0-255), "
                            f"got {image.dtype.name}")
        return getattr(self, self.config.mode)(normalize(image))

    def classes(self, image):
        """int32 class ids [1, H, W] of a uint8 image [1, H, W, 3]."""
        return tf.argmax(self(image), -1, output_type=tf.int32)
