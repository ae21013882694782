"""Read and decode one (image, label) pair, naming the file on any failure; the
pipeline of pairs is ``tfseg.data.pairs``.

TF's decoders raise errors that do not say which file was bad, and a graph
cannot catch exceptions. Two ways around that, both made of tf.data ops only
(so they run on tf.data service workers too):

* strict mode (the default, the fast path): pairs are numbered and each
  carries the previous pair's paths; decoding runs in an ordered parallel
  map followed by ``ignore_errors()``. A dropped pair shows up as a gap in
  the numbers at the next element (an end marker catches the last pair),
  and only then is the slow per-file diagnosis run, for the pair just before
  the gap, to raise an error naming it. Costs nothing per good pair.
* ``skip_bad_examples`` and ``load_pair``: each decode runs in a one-element
  sub-dataset with ``ignore_errors()`` followed by a fallback element, so
  every bad pair is named, logged and counted (~10 ms more per pair).

Accepted inputs, by decision:
  images: as predict reads them (``tfseg.evaluation.images``; docs/datasets.md): JPEG
    (CMYK too) with the accurate integer IDCT, as libjpeg's default in PIL; PNG, GIF,
    WebP; BMP of 24/32 bits or 8-bit uncompressed. Gray is repeated into RGB, alpha is
    dropped, a palette gives its colours, 16-bit is scaled (the high byte), an animation
    gives its first frame. Anything else is refused, naming the file.
  labels: must satisfy the source's ``label_format_ok`` (id labels: 1-8 bit
    grayscale or palette PNG; colour labels: 8-bit RGB/RGBA/palette PNG).
    RGB id labels or 16-bit labels are rejected with an error naming the
    file: guessing how to squeeze them into class ids would hide real bugs.
"""

import tensorflow as tf

from tfseg.data import png
from tfseg.data.traced import plain


def _try(fn, arg, fallback):
    """(fn(arg), True) or (fallback, False) when any op inside ``fn`` fails.

    A tuple ``arg`` is passed to ``fn`` as separate arguments.
    """
    attempt = (tf.data.Dataset.from_tensors(arg).map(plain(lambda *a: (fn(*a), True)))
               .ignore_errors())
    failed = tf.data.Dataset.from_tensors((fallback, False))
    return attempt.concatenate(failed).take(1).get_single_element()


def _bmp(contents):
    """A BMP's pixels. TF's decoder gives an 8-bit one's colour indices, so these are looked
    up in its colour table (the 256 BGRX entries after the info header, zero-padded); a
    compressed one (RLE, whose bytes TF would read as pixels) and the old 12-byte header
    are refused."""
    head = tf.strings.join([tf.strings.substr(contents, 0, 50), b"\0" * 50])
    info, bits, compression = (
        tf.cast(tf.io.decode_raw(tf.strings.substr(head, offset, dtype.size), dtype)[0], tf.int32)
        for offset, dtype in ((14, tf.int32), (28, tf.uint16), (30, tf.int32)))
    ok = (info >= 40) & (tf.not_equal(bits, 8) | tf.equal(compression, 0))
    with tf.control_dependencies([tf.debugging.Assert(ok, ["unsupported BMP"])]):
        pixels = tf.io.decode_bmp(contents)  # channels: 1 (8-bit), 3 or 4
    table = tf.strings.join([tf.strings.substr(contents, 14 + info, 1024), b"\0" * 1024])
    table = tf.reshape(tf.io.decode_raw(tf.strings.substr(table, 0, 1024), tf.uint8), [256, 4])
    colours = tf.gather(table[:, 2::-1], tf.cast(pixels[..., 0], tf.int32))
    return tf.where(tf.equal(bits, 8), colours, pixels[..., :3])


def decode_image(contents):
    """Encoded image bytes -> uint8 [H, W, 3] (see module docstring for conversions)."""
    image = tf.cond(
        tf.io.is_jpeg(contents),
        lambda: tf.io.decode_jpeg(contents, channels=3, dct_method="INTEGER_ACCURATE"),
        lambda: tf.cond(tf.equal(tf.strings.substr(contents, 0, 2), b"BM"),
                        lambda: _bmp(contents), lambda: tf.io.decode_image(
                            contents, channels=3, dtype=tf.uint8, expand_animations=False)))
    return tf.ensure_shape(image, [None, None, 3])


def _size(t):
    shape = tf.strings.as_string(tf.shape(t)[:2])
    return tf.strings.join([shape[0], "x", shape[1]])


def diagnose(image_path, label_path, source, image_shape=None, label_shape=None):
    """A message naming what is wrong with a pair (slow path, only on failure)."""
    image, image_ok = _try(lambda p: decode_image(tf.io.read_file(p)), image_path,
                           tf.zeros([0, 0, 3], tf.uint8))
    contents, read_ok = _try(tf.io.read_file, label_path, tf.constant(b""))
    format_ok = read_ok & source.label_format_ok(png.header(contents))
    (label, _), label_ok = _try(source.decode_label, contents,
                                (tf.zeros([0, 0], tf.int32), tf.constant(0)))
    image_path, label_path = _shown(image_path), _shown(label_path)
    return tf.where(
        ~image_ok, tf.strings.join(["cannot read or decode image file ", image_path]),
        tf.where(~read_ok, tf.strings.join(["cannot read label file ", label_path]),
                 tf.where(~format_ok, tf.strings.join([
                     "label file ", label_path, " is not ", source.label_format]),
                     tf.where(~label_ok, tf.strings.join(["cannot decode label file ", label_path]),
                              _mismatch_message(image_path, label_path, image, label)))))


def _mismatch_message(image_path, label_path, image, label):
    same = tf.reduce_all(tf.equal(tf.shape(image)[:2], tf.shape(label)[:2]))
    return tf.where(same, tf.strings.join(["reading or decoding failed for image ", image_path,
                                           " / label ", label_path]),
                    size_message(image_path, label_path, image, label))


def size_message(image_path, label_path, image, label):
    return tf.strings.join(["image ", _shown(image_path), " is ", _size(image), " but label ",
                            _shown(label_path), " is ", _size(label)])


def _shown(path):
    """``path`` for a message, which must be UTF-8 (TF's Python errors decode theirs): the
    bytes of a name that is not become U+FFFD."""
    return tf.strings.unicode_transcode(path, "UTF-8", "UTF-8", errors="replace")


def decode_one(image_path, label_path, source, decode_label):
    """Read and decode a pair (raises on bad files): (image, label part)."""
    image = decode_image(tf.io.read_file(image_path))
    contents = tf.io.read_file(label_path)
    with tf.control_dependencies([tf.debugging.Assert(
            source.label_format_ok(png.header(contents)), ["bad label format"])]):
        return image, decode_label(contents)


def guarded_decode(image_path, label_path, source, decode_label, fallback_label):
    """``decode_one`` without raising: (image, label part, ok, message)."""
    (image, label), decoded = _try(lambda i, l: decode_one(i, l, source, decode_label),
                                   (image_path, label_path),
                                   (tf.zeros([0, 0, 3], tf.uint8), fallback_label))
    label_map = tf.nest.flatten(label)[0]
    ok = decoded & tf.reduce_all(tf.equal(tf.shape(image)[:2], tf.shape(label_map)[:2]))
    message = tf.cond(ok, lambda: tf.constant(""), lambda: tf.cond(
        decoded, lambda: size_message(image_path, label_path, image, label_map),
        lambda: diagnose(image_path, label_path, source)))
    return image, label, ok, message


def load_pair(image_path, label_path, source):
    """Read, decode and map one pair without raising.

    Args:
      image_path, label_path: scalar tf.string paths.
      source: the ``Source`` whose label decoder and format check apply.

    Returns:
      (image uint8 [H, W, 3], label int32 [H, W], unknown int32 scalar,
       ok bool scalar, message tf.string scalar naming the bad file(s)).
    """
    image, (label, unknown), ok, message = guarded_decode(
        image_path, label_path, source, source.decode_label,
        (tf.zeros([0, 0], tf.int32), tf.constant(0)))
    return image, label, unknown, ok, message
