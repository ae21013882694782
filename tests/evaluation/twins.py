"""Image files of every kind the readers meet, each written from an 8-bit RGB twin: the
pixels a reader must return for it (tests/evaluation/test_images.py for predict's reader,
tests/data/test_images.py for the input pipeline's)."""

import os
import struct
import zlib

import numpy as np
from PIL import Image

SIZE = (24, 32)
# 16 colours, so that the palette kinds hold the twin exactly.
COLOURS = np.random.default_rng(7).integers(0, 256, (16, 3), dtype=np.uint8)
INDICES = np.random.default_rng(8).integers(0, 16, SIZE, dtype=np.uint8)
TWIN = COLOURS[INDICES]
GRAY = TWIN[..., 1]
ALPHA = np.random.default_rng(9).integers(0, 256, SIZE, dtype=np.uint8)


def png16(path, array):
    """A 16-bit PNG of uint16 ``array`` [H, W, C] (PIL writes 16 bits only for grayscale)."""
    height, width, channels = array.shape
    colour_type = {1: 0, 2: 4, 3: 2, 4: 6}[channels]
    rows = b"".join(b"\0" + row.astype(">u2").tobytes() for row in array)

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n"
                + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 16, colour_type, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def _palette(indices=INDICES):
    image = Image.fromarray(indices, "P")
    image.putpalette(COLOURS.reshape(-1).tolist())
    return image


def _gray3(gray):
    return np.repeat(gray[..., None], 3, -1)


# kind: (file name, writer(path), the twin, the most a reader may differ from the twin).
# 16-bit values are the 8-bit ones times 257, so scaling gives them back exactly (a reader
# that rounds instead of dropping the low byte may differ by 1). JPEGs are quality 100,
# 4:4:4: what is left is the codec's rounding.
KINDS = {
    "rgb8": ("rgb8.png", lambda p: Image.fromarray(TWIN).save(p), TWIN, 0),
    "gray8": ("gray8.png", lambda p: Image.fromarray(GRAY).save(p), _gray3(GRAY), 0),
    "gray16": ("gray16.png", lambda p: Image.fromarray(GRAY.astype(np.uint16) * 257).save(p),
               _gray3(GRAY), 1),
    "rgb16": ("rgb16.png", lambda p: png16(p, TWIN.astype(np.uint16) * 257), TWIN, 1),
    "rgba16": ("rgba16.png", lambda p: png16(p, np.dstack([TWIN, ALPHA]).astype(np.uint16) * 257),
               TWIN, 1),
    "bilevel": ("bilevel.png", lambda p: Image.fromarray(GRAY > 127).save(p),
                _gray3(np.where(GRAY > 127, 255, 0).astype(np.uint8)), 0),
    "palette": ("palette.png", lambda p: _palette().save(p), TWIN, 0),
    "palette_bmp": ("palette.bmp", lambda p: _palette().save(p), TWIN, 0),
    "rgba": ("rgba.png", lambda p: Image.fromarray(np.dstack([TWIN, ALPHA])).save(p), TWIN, 0),
    "la": ("la.png", lambda p: Image.fromarray(np.dstack([GRAY, ALPHA]), "LA").save(p),
           _gray3(GRAY), 0),
    "rgb_jpeg": ("rgb.jpg", lambda p: Image.fromarray(TWIN).save(p, quality=100, subsampling=0),
                 TWIN, 4),
    "cmyk_jpeg": ("cmyk.jpg", lambda p: Image.fromarray(TWIN).convert("CMYK").save(p, quality=100),
                  TWIN, 2),
    "gray_jpeg": ("gray.jpg", lambda p: Image.fromarray(GRAY).save(p, quality=100),
                  _gray3(GRAY), 2),
    # Animated: the first frame is read (the pipeline's decode_image, expand_animations=False).
    "animated_gif": ("animated.gif", lambda p: _palette().save(
        p, save_all=True, append_images=[_palette(15 - INDICES)], duration=100), TWIN, 0),
    "animated_png": ("animated.png", lambda p: Image.fromarray(TWIN).save(
        p, save_all=True, append_images=[Image.fromarray(255 - TWIN)]), TWIN, 0),
}


def write(folder, kind, name=None):
    """(path of the ``kind`` file written in ``folder``, its twin, tolerance)."""
    default, writer, twin, tolerance = KINDS[kind]
    path = os.path.join(folder, name or default)
    writer(path)
    return path, twin, tolerance
