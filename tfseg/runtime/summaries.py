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


def write_samples(images, labels, predictions, palette, step, count=2, name="samples"):
    """Writes image | ground truth | prediction strips to the default summary writer.

    ``images`` are the training batch's uint8 RGB [N, H, W, 3] (normalised only on
    the device, inside the step).
    """
    if count <= 0:
        return
    strip = tf.concat([tf.cast(images[:count], tf.uint8), colourise(labels[:count], palette),
                       colourise(predictions[:count], palette)], axis=2)
    tf.summary.image(name, strip, step=step, max_outputs=count)
