"""Training and evaluation transformations, pure TF and stateless.

Randomness comes from an explicit ``seed`` (int32/int64 tensor of shape [2])
fed to ``tf.random.stateless_*`` ops, so every function runs the same eagerly,
inside ``Dataset.map`` and on tf.data service workers, and a pipeline seed
fixes the augmentation exactly.
"""

import functools

import tensorflow as tf

from tfseg.data.source import IGNORE_LABEL, as_int32

# Image padding value: mid-grey, what the model sees as ~0 after ``tfseg.models.normalize``.
# The exact mean, 127.5, is no uint8; 127 and 128 are equally far from it (+-1/255 after
# normalising). 128 is what rounding half to even (``tf.round``) makes of 127.5, so a pad
# made in float and rounded later lands on the same value as one made in uint8.
PAD_VALUE = 128


def to_uint8(image):
    """A float 0-255 image rounded (half to even) and clipped to uint8: at most 0.5 off
    inside [0, 255]."""
    return tf.cast(tf.clip_by_value(tf.round(image), 0.0, 255.0), tf.uint8)


def random_scale_crop(image, label, seed, crop_size, scale_range=(0.5, 2.0)):
    """Random rescale, pad (image: ``PAD_VALUE``, label: 255) and random crop, resampling
    only the crop.

    Equivalent, up to the scale being rounded to whole source pixels, to
    resizing the whole image by ``s`` (corner-aligned), padding it at the
    bottom/right up to ``crop_size`` and cropping a random window; but only
    the source window under the crop is resampled, so the cost depends on the
    crop size, not on the (up to 2x upscaled) image. Image and label are
    sampled at the very same points, bilinear for the image and nearest for
    the label, so they stay aligned.

    Args:
      image: [H, W, 3] uint8 or float.
      label: [H, W] integer class ids.
      seed: [2] int tensor.
      crop_size: (crop_height, crop_width).
      scale_range: (min, max) scale factor, drawn uniformly.

    Returns:
      (float32 [ch, cw, 3] image in 0-255, int32 [ch, cw] label).
    """
    image, label = _scale_crop(image, label, seed, crop_size, scale_range)
    return image, as_int32(label)


def _scale_crop(image, label, seed, crop_size, scale_range):
    """``random_scale_crop``, with the label's ids as float32 (exact), for the caller to cast.

    Both are sampled corner-aligned, at window row ``j * (extent - 1) /
    (valid - 1)`` (and likewise for columns). The image: its window sliced
    and resized by ``ResizeBilinear``, which precomputes its weights (3.5 ms
    for a 512x1024 crop; ``crop_and_resize`` takes 9 ms, converting every
    uint8 tap). The label: ``crop_and_resize`` nearest on the whole label, no
    copy (1.5x faster than slicing + ``ResizeNearestNeighbor``).
    """
    crop_h, crop_w = crop_size
    scale_seed, y_seed, x_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 3))
    label = tf.convert_to_tensor(label)
    shape = tf.shape(label)
    size = tf.cast(shape, tf.float32)
    scale = tf.random.stateless_uniform([], scale_seed, scale_range[0], scale_range[1])
    scaled = tf.maximum(tf.cast(tf.round(size * scale), tf.int32), 1)
    # The part of the crop the scaled image covers; the rest is padding.
    valid = tf.minimum(scaled, [crop_h, crop_w])
    free = scaled - valid
    oy = tf.random.stateless_uniform([], y_seed, 0, free[0] + 1, dtype=tf.int32)
    ox = tf.random.stateless_uniform([], x_seed, 0, free[1] + 1, dtype=tf.int32)
    # The source window under scaled rows/cols [offset, offset + valid).
    ratio = size / tf.cast(scaled, tf.float32)
    start = tf.minimum(tf.cast(tf.cast(tf.stack([oy, ox]), tf.float32) * ratio, tf.int32),
                       shape - 1)
    extent = tf.clip_by_value(tf.cast(tf.round(tf.cast(valid, tf.float32) * ratio), tf.int32),
                              1, shape - start)
    window = tf.slice(image, tf.concat([start, [0]], 0), tf.concat([extent, [-1]], 0))
    image = tf.raw_ops.ResizeBilinear(images=window[tf.newaxis], size=valid,
                                      align_corners=True)[0]
    # In the label's [0, 1] coordinates. The 1e-3 keeps float rounding from
    # pushing the last row past the label's edge (it would read as 255). A
    # single output row samples the box's middle, but ResizeBilinear its start.
    first = tf.cast(start, tf.float32)
    last = tf.cast(start + extent - 1, tf.float32) - 1e-3
    last = tf.where(valid > 1, tf.maximum(last, first), first)
    edge = tf.maximum(size - 1.0, 1.0)
    box = tf.concat([first / edge, last / edge], 0)
    label = tf.image.crop_and_resize(label[tf.newaxis, ..., tf.newaxis], box[tf.newaxis], [0],
                                     valid, method="nearest",
                                     extrapolation_value=IGNORE_LABEL)[0, ..., 0]
    padding = tf.stack([[0, crop_h - valid[0]], [0, crop_w - valid[1]]])
    image = tf.pad(image, tf.concat([padding, [[0, 0]]], 0), constant_values=PAD_VALUE)
    label = tf.pad(label, padding, constant_values=IGNORE_LABEL)
    return tf.reshape(image, [crop_h, crop_w, 3]), tf.reshape(label, [crop_h, crop_w])


def random_flip(image, label, seed):
    """Flip image [H, W, C] and label [H, W] left-right together with probability 1/2."""
    image, label = tf.convert_to_tensor(image), tf.convert_to_tensor(label)
    flip = tf.random.stateless_uniform([], seed) < 0.5
    return tf.cond(flip, lambda: (tf.reverse(image, [1]), tf.reverse(label, [1])),
                   lambda: (image, label))


def photometric_jitter(image, seed, strength=1.0):
    """Random brightness, contrast, saturation and hue of a 0-255 float image [H, W, 3].

    Labels are untouched. ``strength`` scales all ranges (1.0: brightness
    +-0.125, contrast and saturation x0.75-1.25, hue +-0.03).
    """
    seeds = tf.unstack(tf.random.experimental.stateless_split(seed, 4))
    x = tf.cast(image, tf.float32) / 255.0
    x = tf.image.stateless_random_brightness(x, 0.125 * strength, seeds[0])
    x = tf.image.stateless_random_contrast(x, 1 - 0.25 * strength, 1 + 0.25 * strength, seeds[1])
    x = tf.image.stateless_random_saturation(x, 1 - 0.25 * strength, 1 + 0.25 * strength,
                                             seeds[2])
    x = tf.image.stateless_random_hue(x, 0.03 * strength, seeds[3])
    return tf.clip_by_value(x, 0.0, 1.0) * 255.0


def train_transform(image, label, seed, crop_size, scale_range=(0.5, 2.0), flip=True,
                    jitter=False, map_label=None):
    """The full training augmentation, rounded to uint8 (normalised later, on the device).

    Args:
      image: uint8 [H, W, 3]; label: integer [H, W]; seed: [2] int tensor.
      crop_size, scale_range: see ``random_scale_crop``.
      flip: random horizontal flip. jitter: ``photometric_jitter``.
      map_label: optional per-pixel map of the cropped label to int32 class
        ids (e.g. a stored id -> train id table); it must commute with
        nearest-neighbour resampling, flipping and padding with 255.

    Returns:
      (uint8 [ch, cw, 3], within 0.5 of the float crop (``to_uint8``),
       int32 [ch, cw] with ids or 255).
    """
    crop_seed, flip_seed, jitter_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 3))
    image, crop_label = _scale_crop(image, label, crop_seed, crop_size, scale_range)
    if jitter:
        image = photometric_jitter(image, jitter_seed)
    # Same draw as ``random_flip``.
    mirror = tf.random.stateless_uniform([], flip_seed) < 0.5 if flip else tf.constant(False)
    return _crop_tail(map_label or as_int32)(image, crop_label, mirror)


@functools.lru_cache(maxsize=32)
def _crop_tail(map_label):
    """Flip a crop, round it to uint8 and map its label (float ids, as int32), with XLA.

    The crop's shape is fixed, so XLA compiles this once per crop size; as
    TF ops, the per-pixel table lookup alone
    (a gather) costs ~3 ms a 512x1024 crop, ~8% of a Cityscapes image's
    whole pipeline. The shapes before the crop vary per image, so the crop
    itself stays outside XLA.
    """
    @tf.function(jit_compile=True, autograph=False)
    def tail(image, label, mirror):
        image, label = tf.cond(mirror, lambda: (tf.reverse(image, [1]), tf.reverse(label, [1])),
                               lambda: (image, label))
        # Bilinear taps and the jitter's clip can land a little outside [0, 255]:
        # the clip (fused into the same loop) keeps the cast from wrapping around.
        return to_uint8(image), map_label(tf.cast(label, tf.int32))

    return tail


def eval_transform(image, label):
    """Full image, unaugmented: (uint8 [H, W, 3] as decoded, int32 [H, W])."""
    return tf.convert_to_tensor(image, tf.uint8), as_int32(label)
