"""Colour-coded label maps for TensorBoard and for ``predict``'s PNGs."""

import numpy as np
import tensorflow as tf

from tfseg.data import IGNORE_LABEL

IGNORE_COLOUR = (0, 0, 0)


def colourise(labels, palette):
    """int class ids [..., H, W] -> uint8 RGB [..., H, W, 3]; 255 and unknown ids are black."""
    table = np.zeros((256, 3), np.uint8)
    table[:len(palette)] = np.asarray(palette, np.uint8)[:256]
    table[IGNORE_LABEL] = IGNORE_COLOUR
    return tf.gather(tf.constant(table), tf.clip_by_value(tf.cast(labels, tf.int32), 0, 255))


def to_uint8(images):
    """Model inputs in [-1, 1] -> uint8 images."""
    return tf.cast(tf.clip_by_value((images + 1.0) * 127.5, 0, 255), tf.uint8)


def write_samples(images, labels, predictions, palette, step, count=2, name="samples"):
    """Writes image | ground truth | prediction strips to the default summary writer."""
    if count <= 0:
        return
    strip = tf.concat([to_uint8(images[:count]), colourise(labels[:count], palette),
                       colourise(predictions[:count], palette)], axis=2)
    tf.summary.image(name, strip, step=step, max_outputs=count)
