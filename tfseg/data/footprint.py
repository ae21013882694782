"""Host memory an in-memory cache of a split would take, estimated from file headers.

``build_dataset`` checks it before ``Dataset.cache()``: a decoded Cityscapes
train split is ~25 GB (2,975 x 1024 x 2048 x (3 + 1) bytes), and the cache
would only fail (or swap the machine to a halt) after an epoch of decoding.
Sizes come from the headers alone (a few bytes per file, no decoding), so the
check costs milliseconds even for thousands of files.
"""

import os
import struct

import tensorflow as tf

from tfseg.data.png import PNG_SIGNATURE
from tfseg.data.source import IndexLabels
from tfseg.errors import InputError
from tfseg.units import GB, KB, MB

# JPEG start-of-frame markers (all coding types); C4, C8 and CC are other segments.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def image_size(path):
    """(height, width) from the header of a PNG, JPEG, GIF or BMP file, else None.

    These are the formats ``tf.io.decode_image`` reads; anything else (a
    truncated header, a file that cannot be opened) gives None, and the decode
    stage names (or, with ``skip_bad_examples``, skips) the file later.
    """
    try:
        f = open(path, "rb")
    except OSError:
        return None
    with f:
        head = f.read(26)
        if head.startswith(PNG_SIGNATURE) and head[12:16] == b"IHDR" and len(head) >= 24:
            width, height = struct.unpack(">II", head[16:24])
            return height, width
        if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
            width, height = struct.unpack("<HH", head[6:10])
            return height, width
        if head[:2] == b"BM" and len(head) >= 26:
            if struct.unpack("<I", head[14:18])[0] == 12:  # OS/2 header: 16-bit sizes
                width, height = struct.unpack("<HH", head[18:22])
            else:
                width, height = struct.unpack("<ii", head[18:26])
            return abs(height), width  # negative height: rows stored top-down
        if head[:2] == b"\xff\xd8":
            f.seek(2)
            return _jpeg_size(f)
    return None


def _jpeg_size(f):
    """(height, width) from the first SOF segment; ``f`` is just past the SOI marker.

    Segments before SOF (APPn/EXIF, DQT, DHT, ...) all carry a length, so the
    walk seeks over them; the entropy-coded data only starts after SOS, which
    comes after SOF in any valid file.
    """
    while True:
        if f.read(1) != b"\xff":
            return None
        marker = f.read(1)
        while marker == b"\xff":  # fill bytes
            marker = f.read(1)
        if not marker:
            return None
        code = marker[0]
        if code == 0x01 or 0xD0 <= code <= 0xD8:  # TEM, RSTn, SOI: no length
            continue
        length = f.read(2)
        if len(length) < 2:
            return None
        if code in _JPEG_SOF:
            frame = f.read(5)  # precision, height, width
            return struct.unpack(">xHH", frame) if len(frame) == 5 else None
        f.seek(struct.unpack(">H", length)[0] - 2, os.SEEK_CUR)


def label_dtype(source):
    """dtype of the labels ``decode_pairs`` yields (and a cache holds) for ``source``:
    the stored ids (uint8) for ``IndexLabels``, else the decoder's int32 train ids."""
    return tf.uint8 if isinstance(source.decode_label, IndexLabels) else tf.int32


def decoded_bytes(source):
    """Bytes of the decoded (image uint8 [H, W, 3], label) pairs of ``source``.

    Labels have their image's size (a pair that differs is an error), so only
    image headers are read. Unreadable headers count 0: the decode stage names
    (or, with ``skip_bad_examples``, skips) those files.
    """
    per_pixel = 3 + label_dtype(source).size
    total = 0
    for image_path, _ in source.pairs:
        size = image_size(image_path)
        if size is not None:
            total += size[0] * size[1] * per_pixel
    return total


# A container's memory limit and use, cgroup v2 then v1 (where none is set, v2 says "max"
# and v1 a number near 2^63).
_CGROUP_FILES = (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                 ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                  "/sys/fs/cgroup/memory/memory.usage_in_bytes"))


def _read_int(path):
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):  # missing, or "max"
        return None


def cgroup_available(files=_CGROUP_FILES):
    """Bytes a container may still take under its cgroup's memory limit, or None when
    there is no limit (or no cgroup file to read). ``files``: (limit, usage) paths."""
    for limit_path, usage_path in files:
        limit, usage = _read_int(limit_path), _read_int(usage_path)
        if limit is not None and usage is not None and limit < 2**60:
            return max(limit - usage, 0)
    return None


def mem_available():
    """MemAvailable of /proc/meminfo in bytes, or None where it cannot be read (not Linux)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the file says kB, meaning KiB
    except (OSError, ValueError, IndexError):
        return None
    return None


def format_bytes(n):
    """``n`` bytes as "25.0 GB", "4.7 kB", "12 bytes" (decimal units, like ``cache_max_gb``)."""
    for unit, scale in (("GB", GB), ("MB", MB), ("kB", KB)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def require_cache_fits(what, count, estimate, max_gb):
    """Raise ``InputError`` unless ``estimate`` bytes fit in memory.

    The bound is ``max_gb`` gigabytes, or the free memory when that is smaller
    (the cache would not fit at all): the host's MemAvailable, or in a container
    what its cgroup's limit leaves, which the kernel enforces by killing the
    process. ``what`` names the split, ``count`` is its number of examples.
    """
    bound, name = max_gb * GB, f"--cache_max_gb={max_gb:g}"
    for available, source in ((mem_available(), "MemAvailable in /proc/meminfo"),
                              (cgroup_available(), "the container's memory limit")):
        if available is not None and available < bound:
            bound, name = available, source
    if estimate > bound:
        raise InputError(
            f"--cache: the in-memory cache of {what}: its {count:,} decoded examples take "
            f"about {format_bytes(estimate)}, over the {format_bytes(bound)} bound ({name}); "
            f"drop --cache (or, in Python, cache on disk: DataConfig(cache=\"path/prefix\"))")
