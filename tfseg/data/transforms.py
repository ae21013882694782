"""Training and evaluation transformations, pure TF and stateless.

Randomness comes from an explicit ``seed`` (int32/int64 tensor of shape [2])
fed to ``tf.random.stateless_*`` ops, so every function runs the same eagerly,
inside ``Dataset.map`` and on tf.data service workers, and a pipeline seed
fixes the augmentation exactly.
"""

import tensorflow as tf

from tfseg.data.source import IGNORE_LABEL

# Image padding value: the mean of the model's input range (0 after normalize).
PAD_VALUE = 127.5


def normalize(image):
    """uint8/0-255 image -> float32 in [-1, 1], as ``tfseg.models.normalize`` does."""
    return tf.cast(image, tf.float32) / 127.5 - 1.0


def random_scale_crop(image, label, seed, crop_size, scale_range=(0.5, 2.0)):
    """Random rescale, pad (image: 127.5, label: 255) and random crop, in one resampling.

    Equivalent to resizing the whole image by ``s`` (corner-aligned), padding it
    at the bottom/right up to ``crop_size`` and cropping a random window, but
    only the output window is ever computed (``crop_and_resize`` with an
    extrapolation value doing the padding), so the cost depends on the crop
    size, not on the (up to 2x upscaled) image. Image and label are sampled at
    the very same points: bilinear for the image, nearest for the label.

    Args:
      image: [H, W, 3] uint8 or float.
      label: [H, W] integer class ids.
      seed: [2] int tensor.
      crop_size: (crop_height, crop_width), each >= 2.
      scale_range: (min, max) scale factor, drawn uniformly.

    Returns:
      (float32 [ch, cw, 3] image in 0-255, int32 [ch, cw] label).
    """
    return _scale_crop(image, label, seed, crop_size, scale_range)


# crop_and_resize reads these directly; other label dtypes are cast to float32 first.
_RESAMPLE_DTYPES = (tf.uint8, tf.uint16, tf.int8, tf.int16, tf.int32, tf.int64, tf.float32)


def _scale_crop(image, label, seed, crop_size, scale_range, flip=None):
    """``random_scale_crop``; with a bool tensor ``flip``, also mirrored left-right.

    The flip is folded into the crop box (``crop_and_resize`` mirrors boxes
    with x1 > x2), so it costs nothing and samples the same points as
    flipping the crop afterwards. Labels are resampled in their own dtype:
    no full-size float copy of the label.
    """
    crop_h, crop_w = crop_size
    scale_seed, y_seed, x_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 3))
    label = tf.convert_to_tensor(label)
    shape = tf.shape(label)
    size = tf.cast(shape, tf.float32)
    scale = tf.random.stateless_uniform([], scale_seed, scale_range[0], scale_range[1])
    scaled = tf.maximum(tf.cast(tf.round(size * scale), tf.int32), 2)
    free = tf.maximum(scaled - [crop_h, crop_w], 0)
    oy = tf.random.stateless_uniform([], y_seed, 0, free[0] + 1, dtype=tf.int32)
    ox = tf.random.stateless_uniform([], x_seed, 0, free[1] + 1, dtype=tf.int32)
    # Scaled pixel j sits at original pixel j * (size - 1 - eps) / (scaled - 1); the
    # eps keeps the last valid row inside the image despite float rounding.
    step = (size - 1.0 - 1e-3) / tf.cast(scaled - 1, tf.float32) / tf.maximum(size - 1.0, 1.0)
    start = tf.cast(tf.stack([oy, ox]), tf.float32) * step
    end = start + tf.constant([crop_h - 1.0, crop_w - 1.0]) * step
    if flip is None:
        box = tf.concat([start, end], 0)
    else:
        x0, x1 = tf.where(flip, end[1], start[1]), tf.where(flip, start[1], end[1])
        box = tf.stack([start[0], x0, end[0], x1])

    def resample(x, method, fill):
        return tf.image.crop_and_resize(x[tf.newaxis], box[tf.newaxis], [0], [crop_h, crop_w],
                                        method=method, extrapolation_value=fill)[0]

    image = resample(image, "bilinear", PAD_VALUE)
    if label.dtype not in _RESAMPLE_DTYPES:
        label = tf.cast(label, tf.float32)
    label = resample(label[..., tf.newaxis], "nearest", IGNORE_LABEL)
    return image, tf.cast(label[..., 0], tf.int32)


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
                    jitter=False):
    """The full training augmentation, then normalisation.

    Args:
      image: uint8 [H, W, 3]; label: integer [H, W]; seed: [2] int tensor.
      crop_size, scale_range: see ``random_scale_crop``.
      flip: random horizontal flip. jitter: ``photometric_jitter``.

    Returns:
      (float32 [ch, cw, 3] in [-1, 1], int32 [ch, cw] with ids or 255).
    """
    crop_seed, flip_seed, jitter_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 3))
    # Same draw as ``random_flip``, applied through the crop box.
    mirror = tf.random.stateless_uniform([], flip_seed) < 0.5 if flip else None
    image, label = _scale_crop(image, label, crop_seed, crop_size, scale_range, mirror)
    if jitter:
        image = photometric_jitter(image, jitter_seed)
    return normalize(image), label


def eval_transform(image, label):
    """Full image, unaugmented: (float32 [H, W, 3] in [-1, 1], int32 [H, W])."""
    return normalize(image), tf.cast(label, tf.int32)
