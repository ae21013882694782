"""``DataConfig``: everything that shapes an input pipeline, in one frozen value."""

import dataclasses
from typing import Optional, Tuple, Union

from tfseg.data.registry import reader
from tfseg.errors import InputError


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Input pipeline settings (library code takes this, never absl FLAGS).

    Attributes:
      dataset: the name a reader registered (``tfseg.data.registry``; the built-in
        ones: ``tfseg.config.registry.DATASETS``). "synthetic" writes the default synthetic
        Cityscapes-layout set under ``root`` if it is not complete there, then
        reads it as Cityscapes. "tfrecord" reads shards from ``write_tfrecords``.
      root: data set folder (for "voc": the VOC2012 folder; for "ade20k": the
        ADEChallengeData2016 folder; for "folder": the one holding classes.txt).
      split: "train", "val", ...
      crop_size: training crop (height, width), each >= 2.
      batch_size: examples per batch. Training batches are full (remainder
        dropped, static shapes); evaluation keeps the last partial batch and
        pads different-sized images (image 0 = mean, label 255).
      scale_range: training random scale (min, max).
      flip: training random horizontal flip.
      jitter: training photometric jitter.
      cache: False (default), True (in memory) or a file path prefix (on
        disk); caches decoded full-size examples before augmentation. In
        memory, a split whose decoded size (estimated from the image file
        headers, or TFRecord metadata) is over ``cache_max_gb`` or the host's
        MemAvailable is refused with an ``InputError``; training then
        reshuffles the whole split every epoch (a buffer of references into
        the cache). A file cache keeps the first epoch's order, mixed by
        ``shuffle_buffer``.
      cache_max_gb: bound, in GB (1e9 bytes), on an in-memory cache (default
        4.0: VOC train or CamVid fit, Cityscapes train, ~25 GB, does not).
      deterministic: keep element order fixed under parallelism (with a seed,
        training batches are then reproducible).
      shuffle_buffer: element shuffle buffer for a file cache and for
        TFRecords (whose shard order is shuffled too). Training on files
        always shuffles the whole file list each epoch, before decoding.
      skip_bad_examples: log, count and drop bad files (for "tfrecord": the
        unreadable records of a corrupt shard) instead of failing.
      data_service: "grpc://HOST:PORT" of a tf.data service dispatcher to run
        the preprocessing on, or None for in-process.
      data_service_timeout: seconds to wait for the dispatcher to accept a connection
        before an ``InputError`` naming it.
      seed: shuffling and augmentation seed; None for fresh randomness.
    """

    dataset: str = "cityscapes"
    root: str = ""
    split: str = "train"
    crop_size: Tuple[int, int] = (513, 513)
    batch_size: int = 8
    scale_range: Tuple[float, float] = (0.5, 2.0)
    flip: bool = True
    jitter: bool = False
    cache: Union[bool, str] = False
    cache_max_gb: float = 4.0
    deterministic: bool = False
    shuffle_buffer: int = 64
    skip_bad_examples: bool = False
    data_service: Optional[str] = None
    data_service_timeout: float = 30.0
    seed: Optional[int] = None

    def __post_init__(self):
        reader(self.dataset)  # an unknown name: one line listing the registered ones
        if min(self.crop_size) < 2:
            raise InputError(f"crop_size must be at least 2x2, got {self.crop_size}")
        if not 0 < self.scale_range[0] <= self.scale_range[1]:
            raise InputError(f"bad scale_range {self.scale_range}")
        if not self.cache_max_gb > 0:
            raise InputError(f"cache_max_gb must be > 0, got {self.cache_max_gb}")
        if self.batch_size < 1:
            raise InputError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.data_service is not None and not self.data_service.startswith("grpc://"):
            raise InputError(f"data_service must look like grpc://HOST:PORT, "
                             f"got {self.data_service!r}")
