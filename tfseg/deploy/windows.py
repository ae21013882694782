"""A fixed-size model (the .tflite) at any image size, as eval's sliding mode runs one.

A file that takes one size (H, W) never has an image stretched to it: stretching
changes what the model sees (70-96% of the pixels agreed with the checkpoint's classes
at other sizes). Instead the image is padded at the bottom and right up to at least
(H, W) with what eval pads with, 0 after normalisation, which is 127.5 in uint8: a
checkerboard of 127 and 128, whose mean it is (a plain 128 tipped 0.3-0.6% of a
little-trained model's pixels, the checkerboard under 0.1%), run in windows of (H, W)
every ``stride`` pixels (eval's two thirds of a window) with one flush with each end,
and cropped back. Where windows overlap, their
softmax probabilities are averaged, as ``--eval_mode=sliding`` does with
``--eval_crop=H,W``: the file then gives the checkpoint's classes in that mode (up to
float error). A file without ``logits`` takes each pixel's class from the window in
which it lies deepest instead. An image of the file's size runs as it is.

Example::

    run = tf.lite.Interpreter("export/model.tflite").get_signature_runner()
    classes = windowed(lambda x: run(image=x), (128, 256), uint8_image)   # [1, h, w]
"""

import numpy as np

from tfseg.evaluation.inference import window_starts


def grey(height, width):
    """uint8 [1, height, width, 3] whose mean is 127.5, eval's padding of 0 before its
    normalisation: 127 and 128 in a checkerboard."""
    board = 127 + np.indices((height, width)).sum(0) % 2
    return np.repeat(board.astype(np.uint8)[np.newaxis, ..., np.newaxis], 3, -1)


def stride_for(size):
    """The windows' step for a file of ``size``: two thirds of each side, as eval's default
    (86 for its 129 window)."""
    return tuple(max(n - n // 3, 1) for n in size)


def windowed(run, size, image):
    """int32 class ids [1, h, w] of the uint8 ``image`` [1, h, w, 3] through ``run``, a
    model that takes uint8 [1, H, W, 3] only (``size`` = (H, W)) and returns a dict with
    int32 ``classes`` [1, H, W] and, where it has them, float ``logits`` [1, H, W, C]."""
    image = np.asarray(image, np.uint8)
    height, width = image.shape[1:3]
    if (height, width) == tuple(size):
        return np.asarray(run(image)["classes"], np.int32)
    full = (max(height, size[0]), max(width, size[1]))
    padded = grey(*full)
    padded[:, :height, :width] = image
    total = depth = classes = None
    counts = np.zeros(full, np.float32)
    for y in window_starts(full[0], size[0], stride_for(size)[0]):
        for x in window_starts(full[1], size[1], stride_for(size)[1]):
            window = (slice(y, y + size[0]), slice(x, x + size[1]))
            out = run(padded[(slice(None), *window)])
            if "logits" in out:
                total = _add_probabilities(total, full, window, out["logits"][0])
            else:
                depth, classes = _deepest(depth, classes, full, window, (y, x), size,
                                          out["classes"][0])
            counts[window] += 1
    if total is not None:
        classes = np.argmax(total / counts[..., None], -1)
    return classes[np.newaxis, :height, :width].astype(np.int32)


def _add_probabilities(total, full, window, logits):
    """``total`` (made at the first window) plus the softmax of ``logits`` at ``window``."""
    logits = np.asarray(logits, np.float32)
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    if total is None:
        total = np.zeros((*full, logits.shape[-1]), np.float32)
    total[window] += probabilities
    return total


def _deepest(depth, classes, full, window, start, size, found):
    """Keeps, per pixel, the class of the window in which it lies deepest: farthest from
    the window's edges that are not the padded image's own edges."""
    if depth is None:
        depth, classes = np.full(full, -1.0, np.float32), np.zeros(full, np.int32)
    rows, cols = np.mgrid[0:size[0], 0:size[1]].astype(np.float32)
    inner = [(start[0] > 0, rows), (start[0] + size[0] < full[0], size[0] - 1 - rows),
             (start[1] > 0, cols), (start[1] + size[1] < full[1], size[1] - 1 - cols)]
    here = np.full(size, np.inf, np.float32)
    for is_inner, distance in inner:
        if is_inner:
            here = np.minimum(here, distance)
    deeper = here > depth[window]
    depth[window] = np.where(deeper, here, depth[window])
    classes[window] = np.where(deeper, np.asarray(found), classes[window])
    return depth, classes
