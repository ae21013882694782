"""A class legend under a predicted overlay: a colour swatch and the name of each class
present in the image, drawn with PIL (predict's image library) in its default font.

The legend is a white strip below the image: entries left to right in class order,
wrapped to the image's width (the strip is widened for an entry wider than the image).
The image itself keeps its pixels, at the top left.

Example:
    import numpy as np
    labels = np.array([[0, 0], [2, 2]])
    overlay = np.zeros((2, 2, 3), np.uint8)
    with_legend(overlay, labels, ["road", "sidewalk", "sky"],
                [(128, 64, 128), (244, 35, 232), (70, 130, 180)]).shape  # (strip + 2, W, 3)
"""

import numpy as np
from PIL import Image, ImageDraw, ImageFont

SWATCH = 12  # a swatch's side in pixels, its 1-pixel outline included
_GAP, _MARGIN = 8, 4  # between entries; around the strip and between swatch and name
_BACKGROUND, _INK = (255, 255, 255), (0, 0, 0)


def present_classes(labels, num_classes):
    """The class ids in ``labels`` (int [H, W]) below ``num_classes``, ascending (255,
    the ignore label, is none)."""
    ids = np.unique(np.asarray(labels))
    return [int(c) for c in ids if 0 <= c < num_classes]


def _layout(names, font, width):
    """[(x, y) of each entry's swatch], the strip's width and height."""
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    line = max(SWATCH, font.getbbox("Ag")[3]) + _MARGIN
    sizes = [SWATCH + _MARGIN + int(np.ceil(probe.textlength(n, font=font))) for n in names]
    width = max([width, *(s + 2 * _MARGIN for s in sizes)])
    places, x, y = [], _MARGIN, _MARGIN
    for size in sizes:
        if x > _MARGIN and x + size > width - _MARGIN:
            x, y = _MARGIN, y + line
        places.append((x, y))
        x += size + _GAP
    return places, width, y + line + _MARGIN


def with_legend(overlay, labels, class_names, palette):
    """uint8 [H + strip, max(W, widest entry), 3]: ``overlay`` (uint8 [H, W, 3]) above a
    legend of the classes in ``labels`` (int [H, W]), each as a swatch of its
    ``palette`` colour (uint8 [C, 3]) outlined in black, then its name from
    ``class_names``."""
    height, width = overlay.shape[:2]
    present = present_classes(labels, min(len(class_names), len(palette)))
    font = ImageFont.load_default()
    names = [str(class_names[c]) for c in present]
    places, strip_width, strip = _layout(names, font, width)
    canvas = Image.new("RGB", (strip_width, height + strip), _BACKGROUND)
    canvas.paste(Image.fromarray(np.asarray(overlay, np.uint8)), (0, 0))
    draw = ImageDraw.Draw(canvas)
    for c, name, (x, y) in zip(present, names, places):
        top = height + y
        colour = tuple(int(v) for v in np.asarray(palette[c])[:3])
        draw.rectangle([x, top, x + SWATCH - 1, top + SWATCH - 1], fill=colour, outline=_INK)
        # Centred on the swatch by the text's box (bitmap fonts take no anchor).
        box = font.getbbox(name)
        draw.text((x + SWATCH + _MARGIN, top + (SWATCH - box[1] - box[3]) // 2), name,
                  fill=_INK, font=font)
    return np.asarray(canvas)
