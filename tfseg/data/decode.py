"""Read and decode (image, label) pairs, naming the file on any failure.

TF's decoders raise errors that do not say which file was bad, and a graph
cannot catch exceptions. So each decode runs in a one-element sub-dataset
with ``ignore_errors()`` followed by a fallback element; whichever comes
first tells us whether decoding worked, while we still hold the paths. Only
tf.data ops are involved, so this runs on tf.data service workers too.

Accepted inputs, by decision:
  images: JPEG/PNG/GIF/BMP; grayscale is replicated to RGB, RGBA drops alpha,
    16-bit PNG is scaled to 8 bits (all three are common and unambiguous).
  labels: must satisfy the source's ``label_format_ok`` (id labels: 1-8 bit
    grayscale or palette PNG; colour labels: 8-bit RGB/RGBA/palette PNG).
    RGB id labels or 16-bit labels are rejected with an error naming the
    file: guessing how to squeeze them into class ids would hide real bugs.
"""

import sys

import tensorflow as tf

from tfseg.data import png


def _try(fn, arg, fallback):
    """(fn(arg), True) or (fallback, False) when any op inside ``fn`` fails.

    A tuple ``arg`` is passed to ``fn`` as separate arguments.
    """
    attempt = tf.data.Dataset.from_tensors(arg).map(lambda *a: (fn(*a), True)).ignore_errors()
    failed = tf.data.Dataset.from_tensors((fallback, False))
    return attempt.concatenate(failed).take(1).get_single_element()


def decode_image(contents):
    """Encoded image bytes -> uint8 [H, W, 3] (see module docstring for conversions)."""
    return tf.io.decode_image(contents, channels=3, dtype=tf.uint8, expand_animations=False)


def _size(t):
    shape = tf.strings.as_string(tf.shape(t)[:2])
    return tf.strings.join([shape[0], "x", shape[1]])


def _diagnose(image_path, label_path, source, image_shape=None, label_shape=None):
    """A message naming what is wrong with a pair (slow path, only on failure)."""
    image, image_ok = _try(lambda p: decode_image(tf.io.read_file(p)), image_path,
                           tf.zeros([0, 0, 3], tf.uint8))
    contents, read_ok = _try(tf.io.read_file, label_path, tf.constant(b""))
    format_ok = read_ok & source.label_format_ok(png.header(contents))
    (label, _), label_ok = _try(source.decode_label, contents,
                                (tf.zeros([0, 0], tf.int32), tf.constant(0)))
    return tf.where(
        ~image_ok, tf.strings.join(["cannot read or decode image file ", image_path]),
        tf.where(~read_ok, tf.strings.join(["cannot read label file ", label_path]),
                 tf.where(~format_ok, tf.strings.join([
                     "label file ", label_path, " is not ", source.label_format]),
                     tf.where(~label_ok, tf.strings.join(["cannot decode label file ", label_path]),
                              _size_message(image_path, label_path, image, label)))))


def _size_message(image_path, label_path, image, label):
    return tf.strings.join(["image ", image_path, " is ", _size(image), " but label ",
                            label_path, " is ", _size(label)])


def load_pair(image_path, label_path, source):
    """Read, decode and map one pair without raising.

    The common case costs one guarded decode; only a failing pair pays for
    the per-file diagnosis that builds the message.

    Args:
      image_path, label_path: scalar tf.string paths.
      source: the ``Source`` whose label decoder and format check apply.

    Returns:
      (image uint8 [H, W, 3], label int32 [H, W], unknown int32 scalar,
       ok bool scalar, message tf.string scalar naming the bad file(s)).
    """

    def decode(image_path, label_path):
        image = decode_image(tf.io.read_file(image_path))
        contents = tf.io.read_file(label_path)
        with tf.control_dependencies([tf.debugging.Assert(
                source.label_format_ok(png.header(contents)), ["bad label format"])]):
            label, unknown = source.decode_label(contents)
        return image, label, unknown

    (image, label, unknown), decoded = _try(
        decode, (image_path, label_path),
        (tf.zeros([0, 0, 3], tf.uint8), tf.zeros([0, 0], tf.int32), tf.constant(0)))
    size_ok = tf.reduce_all(tf.equal(tf.shape(image)[:2], tf.shape(label)))
    ok = decoded & size_ok
    message = tf.cond(ok, lambda: tf.constant(""), lambda: tf.cond(
        decoded, lambda: _size_message(image_path, label_path, image, label),
        lambda: _diagnose(image_path, label_path, source)))
    return image, label, unknown, ok, message


def pairs_to_examples(pairs_ds, source, skip_bad_examples=False, stats=None,
                      num_parallel_calls=tf.data.AUTOTUNE, deterministic=None, keep_path=False):
    """Map a dataset of (image_path, label_path) to (image uint8 HxWx3, label int32 HxW).

    With ``keep_path`` the elements are (image, label, image_path).

    Strict mode (default) fails on the first bad pair with an
    InvalidArgumentError whose message names the file(s). With
    ``skip_bad_examples`` bad pairs are logged to stderr (naming the files),
    counted in ``stats.bad_examples`` when given, and dropped.
    """

    def load(image_path, label_path):
        image, label, unknown, ok, message = load_pair(image_path, label_path, source)
        deps = stats.record(ok, unknown) if stats is not None else []
        if skip_bad_examples:
            def log():
                with tf.control_dependencies([tf.print("tfseg: skipping bad example:", message,
                                                       output_stream=sys.stderr)]):
                    return tf.constant(False)
            deps.append(tf.cond(ok, lambda: tf.constant(True), log))
        else:
            deps.append(tf.debugging.Assert(ok, ["tfseg:", message]))
        with tf.control_dependencies(deps):
            return tf.identity(image), tf.identity(label), tf.identity(ok), image_path

    examples = pairs_ds.map(load, num_parallel_calls=num_parallel_calls,
                            deterministic=deterministic)
    if skip_bad_examples:
        examples = examples.filter(lambda image, label, ok, path: ok)
    if keep_path:
        return examples.map(lambda image, label, ok, path: (image, label, path))
    return examples.map(lambda image, label, ok, path: (image, label))


def pairs_dataset(pairs):
    """A dataset of ``(image_path, label_path)`` string scalars from a list of pairs."""
    images, labels = zip(*pairs)
    return tf.data.Dataset.from_tensor_slices((list(images), list(labels)))
