"""Pure-TF PNG header inspection and palette-index decoding.

Everything here is made of TF ops (no ``py_function``), so it serialises into
the tf.data graph and runs unchanged on tf.data service workers.
"""

import numpy as np
import tensorflow as tf

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
GRAY, RGB, PALETTE, GRAY_ALPHA, RGBA = 0, 2, 3, 4, 6

# Signature (8) + IHDR length/type (8) + IHDR data (13) + IHDR CRC (4).
_HEAD_LEN = 33


def _crc_table():
    table = np.zeros(256, np.int64)
    for n in range(256):
        c = n
        for _ in range(8):
            c = (0xEDB88320 ^ (c >> 1)) if c & 1 else (c >> 1)
        table[n] = c
    return table


_CRC_TABLE = _crc_table()
_BYTE_STRINGS = [bytes([i]) for i in range(256)]


def header(contents):
    """Parse a PNG's IHDR without decoding pixels.

    Args:
      contents: scalar tf.string, the file's bytes (any length, may be garbage).

    Returns:
      dict of scalar tensors: ``is_png`` (bool: signature and IHDR present),
      ``height``, ``width``, ``bit_depth``, ``colour_type`` (int32; meaningless
      when ``is_png`` is False).
    """
    # Pad so that short or empty files still give 33 bytes to look at; only the
    # head is copied, not the whole file (this runs for every label read).
    padded = tf.strings.join([tf.strings.substr(contents, 0, _HEAD_LEN), b"\0" * _HEAD_LEN])
    head = tf.io.decode_raw(tf.strings.substr(padded, 0, _HEAD_LEN), tf.uint8)
    head = tf.cast(tf.reshape(head, [_HEAD_LEN]), tf.int64)
    signature = tf.constant(list(PNG_SIGNATURE) + list(b"IHDR"), tf.int64)
    is_png = tf.logical_and(
        tf.reduce_all(tf.equal(tf.concat([head[:8], head[12:16]], 0), signature)),
        tf.strings.length(contents) > _HEAD_LEN,
    )

    def be32(offset):
        b = head[offset:offset + 4]
        return tf.cast(b[0] * 2**24 + b[1] * 2**16 + b[2] * 2**8 + b[3], tf.int32)

    return dict(
        is_png=is_png,
        width=be32(16),
        height=be32(20),
        bit_depth=tf.cast(head[24], tf.int32),
        colour_type=tf.cast(head[25], tf.int32),
    )


def is_index_png(hdr):
    """True for single-channel class-id PNGs: grayscale or palette, <= 8 bits."""
    depth_ok = tf.reduce_any(tf.equal(hdr["bit_depth"], [1, 2, 4, 8]))
    type_ok = tf.reduce_any(tf.equal(hdr["colour_type"], [GRAY, PALETTE]))
    return hdr["is_png"] & depth_ok & type_ok


def is_colour_png(hdr):
    """True for 8-bit colour PNGs (RGB, RGBA or palette) usable as colour labels."""
    rgb = tf.reduce_any(tf.equal(hdr["colour_type"], [RGB, RGBA])) & tf.equal(hdr["bit_depth"], 8)
    pal = tf.equal(hdr["colour_type"], PALETTE)
    return hdr["is_png"] & (rgb | pal)


def crc32(byte_values):
    """CRC-32 (as in PNG/zlib) of a static-length int64 vector of byte values."""
    crc = tf.constant(0xFFFFFFFF, tf.int64)
    table = tf.constant(_CRC_TABLE)
    for i in range(int(byte_values.shape[0])):
        index = tf.bitwise.bitwise_and(tf.bitwise.bitwise_xor(crc, byte_values[i]), 0xFF)
        crc = tf.bitwise.bitwise_xor(tf.gather(table, index), tf.bitwise.right_shift(crc, 8))
    return tf.bitwise.bitwise_xor(crc, 0xFFFFFFFF)


def _first_idat(contents):
    """Byte offset of the first IDAT chunk of a PNG's bytes (int64 scalar), found by
    walking the chunks from the IHDR's end; past the file's end when it has none."""
    length = tf.cast(tf.strings.length(contents), tf.int64)

    def keep_looking(offset, found):
        return ~found & (offset + 8 <= length)

    def step(offset, found):
        size = tf.cast(tf.io.decode_raw(tf.strings.substr(contents, offset, 4), tf.uint8,
                                        little_endian=False), tf.int64)
        size = tf.reduce_sum(size * tf.constant([2**24, 2**16, 2**8, 1], tf.int64))
        is_idat = tf.equal(tf.strings.substr(contents, offset + 4, 4), b"IDAT")
        # A chunk is its length, type and CRC (12 bytes) around its data.
        return tf.where(is_idat, offset, offset + 12 + size), is_idat

    offset, _ = tf.while_loop(keep_looking, step,
                              (tf.constant(_HEAD_LEN, tf.int64), tf.constant(False)))
    return offset


def palette_as_grayscale(contents):
    """A palette PNG's bytes rewritten as the grayscale PNG of its index stream.

    The IHDR's colour type becomes 0 (grayscale), with its CRC recomputed, and the
    chunks between the IHDR and the first IDAT are dropped: PLTE, tRNS, bKGD, sBIT and
    hIST describe the palette, which a grayscale reading would get wrong, and libpng
    logs a warning for each of them in every file it reads (thousands per epoch on
    VOC); none changes the pixel data. Chunks from the first IDAT on are kept as they
    are. Pure TF: a few ops per chunk before the image data, one copy of the file.

    Args:
      contents: scalar tf.string, bytes of a palette PNG (``header``'s colour_type 3).

    Returns:
      scalar tf.string: a grayscale PNG whose pixel values are the palette indices.

    Example:
        gray = palette_as_grayscale(tf.io.read_file("label.png"))
        ids = tf.io.decode_png(gray, channels=1)  # 8-bit: the indices, not their colours
    """
    head = tf.io.decode_raw(tf.strings.substr(contents, 0, _HEAD_LEN), tf.uint8)
    head = tf.cast(tf.reshape(head, [_HEAD_LEN]), tf.int64)
    gray_ihdr = tf.concat([head[12:25], tf.zeros([1], tf.int64), head[26:29]], 0)
    crc = crc32(gray_ihdr)
    crc_bytes = tf.stack([tf.bitwise.bitwise_and(tf.bitwise.right_shift(crc, s), 0xFF)
                          for s in (24, 16, 8, 0)])
    length = tf.cast(tf.strings.length(contents), tf.int64)
    # No IDAT (a broken file): nothing after the IHDR, and decode_png fails as before.
    idat = tf.minimum(_first_idat(contents), length)
    return tf.strings.reduce_join(tf.concat([
        [tf.strings.substr(contents, 0, 25), b"\0", tf.strings.substr(contents, 26, 3)],
        tf.gather(tf.constant(_BYTE_STRINGS), crc_bytes),
        [tf.strings.substr(contents, idat, length - idat)],
    ], 0))


def decode_index_png(contents):
    """Decode a grayscale or palette PNG to its stored *indices*, in pure TF.

    ``tf.io.decode_png`` expands a palette PNG to the palette's colours, and
    mapping colours back to indices is ambiguous whenever two palette entries
    share a colour (common: unused entries are all black). Instead this
    rewrites the IHDR colour type from 3 (palette) to 0 (grayscale) and fixes
    the IHDR CRC (``palette_as_grayscale``); the pixel data of a palette PNG
    *is* its index stream, so libpng then returns the indices exactly.
    Sub-byte depths (1/2/4 bits, which PIL writes for small palettes) come
    back scaled to 0-255 by libpng and are divided back.

    Args:
      contents: scalar tf.string, bytes of a PNG accepted by ``is_index_png``.

    Returns:
      uint8 tensor [H, W] of indices.
    """
    hdr = header(contents)
    # cond, not where: grayscale files skip the patch (a copy of the whole file).
    indexed = tf.cond(tf.equal(hdr["colour_type"], PALETTE),
                      lambda: palette_as_grayscale(contents), lambda: contents)
    values = tf.io.decode_png(indexed, channels=1, dtype=tf.uint8)[..., 0]
    depth = tf.minimum(hdr["bit_depth"], 8)
    step = tf.cast(255 // (tf.bitwise.left_shift(1, depth) - 1), tf.uint8)
    # cond: 8-bit files (the usual case) skip a whole-image division.
    return tf.cond(depth < 8, lambda: values // step, lambda: values)
