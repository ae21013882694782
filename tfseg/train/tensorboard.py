"""TensorBoard scalars and images written with TensorFlow core only.

TensorFlow 2.21 no longer depends on the ``tensorboard`` package, and without
it ``tf.summary.scalar`` / ``tf.summary.image`` raise ``TBNotInstalledError``.
The event writer (``tf.summary.write``) is in TF core, so these write the same
records those functions would (the "scalars" and "images" plugins' formats),
and TensorBoard, installed anywhere, reads them.
"""

import tensorflow as tf
from tensorflow.core.framework import summary_pb2


def _metadata(plugin):
    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=plugin))


def scalar(name, value, step):
    """As ``tf.summary.scalar`` (to the default writer)."""
    return tf.summary.write(name, tf.cast(value, tf.float32), step=step,
                            metadata=_metadata("scalars"))


def image(name, images, step, max_outputs=3):
    """As ``tf.summary.image`` for uint8 images [N, H, W, 3]: [width, height, png...] strings."""
    images = tf.convert_to_tensor(images)[:max_outputs]
    pngs = tf.map_fn(tf.io.encode_png, images, fn_output_signature=tf.string)
    shape = tf.shape(images)
    dims = tf.strings.as_string([shape[2], shape[1]])
    return tf.summary.write(name, tf.concat([dims, pngs], 0), step=step,
                            metadata=_metadata("images"))
