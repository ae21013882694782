"""Predict's image reader: a file as the 8-bit RGB pixels the input pipeline
(``tfseg.data.decode.decode_image``) gives for the same file, or a one-line ``InputError``
naming it.

What each kind of file becomes (docs/datasets.md, "Which images are read"):
  * 8-bit RGB, grayscale, bilevel: as stored; gray is repeated into R, G and B.
  * palette (PNG, GIF, BMP): the palette's colours.
  * alpha (RGBA, LA, a palette's transparency): dropped, not blended.
  * CMYK JPEG: converted to RGB (Adobe's inverted CMYK as well).
  * 16-bit (PNG, TIFF): scaled to 8 bits by dropping the low byte (65535 -> 255, as
    libpng's strip_16 in TF), never clipped (PIL's ``convert("RGB")`` clips 16-bit
    gray at 255: nearly every pixel white).
  * animated (GIF, APNG): the first frame.
  * 32-bit integer or float pixels: refused; there is no one 8-bit reading of them.
"""

import os

import numpy as np
from PIL import Image

from tfseg.errors import InputError

# Modes whose convert("RGB") is the reading above (La, RGBa: premultiplied alpha).
_AS_RGB = frozenset({"1", "L", "P", "RGB", "RGBX", "CMYK", "YCbCr", "LA", "La", "PA", "RGBA",
                     "RGBa"})
_SIXTEEN = frozenset({"I;16", "I;16L", "I;16B", "I;16N"})
# What PIL raises for a file it cannot open or decode: OSError for most (truncated,
# unknown format, missing), SyntaxError/ValueError/EOFError from some decoders.
_UNREADABLE = (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError)


def display_name(path):
    """``path`` as printable text: a name that is not UTF-8 (bytes on Linux) shows its
    odd bytes as ``\\xe9``, so that a message naming it can be printed or logged anywhere."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _refuse(path, reason):
    reason = display_name(" ".join(str(reason).split()))
    return InputError(f"cannot read image {display_name(path)}: {reason}")


def _reason(error):
    if isinstance(error, Image.UnidentifiedImageError):
        return "not an image file of a format PIL reads"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror  # without the file name, which the message already has
    return error


def _to_rgb(image):
    """uint8 [H, W, 3] of a loaded PIL image, or None for a mode with no 8-bit reading."""
    mode = image.mode
    # 16-bit grayscale is I;16, or I (32-bit) from older Pillows' PNG reader.
    if mode in _SIXTEEN or (mode == "I" and image.format == "PNG"):
        gray = (np.clip(np.asarray(image), 0, 65535) >> 8).astype(np.uint8)
        return np.repeat(gray[..., np.newaxis], 3, axis=-1)
    if mode in _AS_RGB:
        return np.asarray(image.convert("RGB"))
    return None


def read_rgb(path):
    """uint8 [H, W, 3] of the image file at ``path`` (str or bytes; see the module).

    Raises:
      InputError: one line naming the file, for a file that is missing or unreadable,
        not an image, damaged, over PIL's pixel limit (``Image.MAX_IMAGE_PIXELS``) or
        of 32-bit integer or float pixels.
    """
    try:
        with Image.open(path) as image:
            image.load()  # the first frame of an animation
            rgb = _to_rgb(image)
            mode = image.mode
    except _UNREADABLE as error:
        raise _refuse(path, _reason(error)) from None
    if rgb is None:
        pixels = {"F": " (32-bit float pixels)", "I": " (32-bit integer pixels)"}.get(mode[0], "")
        raise _refuse(path, f"mode {mode}{pixels} has no one 8-bit RGB reading; save it as "
                            f"8- or 16-bit RGB or grayscale")
    return rgb
