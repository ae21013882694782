"""Build the tf.data input pipeline from a ``DataConfig``.

Order of stages (training, image files): the file indices of each epoch in a
stateless order keyed by (seed, epoch) (``order``: the whole list, before
decoding: Cityscapes files are sorted by city, so anything less global would
fill a batch from one or two cities), cut to whole batches, the part before
the start batch dropped -> paths -> parallel read+decode+label mapping ->
augment with a stateless seed per (seed, epoch, position) -> batch -> [tf.data
service] -> prefetch. With a cache: one epoch in the start epoch's order ->
decode -> cache -> shuffle -> repeat. TFRecords shuffle their shard order,
interleave shards, then use a ``shuffle_buffer``. Images stay uint8 to the
device, where the model's caller normalises them.

No cache by default: decoded full-size images are large (Cityscapes train:
~25 GB). ``cache=True`` (in memory) is refused before any decoding when the
split's decoded size, estimated from file headers (``footprint``), exceeds
``cache_max_gb`` or MemAvailable. A cache freezes the order of the epoch that
filled it, so after an in-memory cache a shuffle buffer of the whole split
reshuffles every epoch (it holds references to the cached tensors, not
copies; the first batch waits until the whole split is decoded). A file
cache (``cache="prefix"``) needs no memory bound; a buffer of the whole split
read back from disk would hold it all in memory, so it keeps the first
epoch's (shuffled) order, mixed by ``shuffle_buffer``.
"""
import os

import tensorflow as tf

from tfseg.data import footprint, order, tfrecords
from tfseg.data.pairs import decode_pairs, pairs_dataset
from tfseg.data.feed import require_reachable
from tfseg.data.registry import reader
from tfseg.data.source import IGNORE_LABEL, as_int32
from tfseg.data.stats import DataStats
from tfseg.data.traced import plain
from tfseg.data.transforms import PAD_VALUE, eval_transform, train_transform


def get_source(config):
    """The ``Source`` (files, classes, palette) that ``config`` reads, from the reader
    registered as ``config.dataset`` (``tfseg.data.registry``).

    For "tfrecord" the pairs are empty and the classes come from the metadata.
    """
    found = reader(config.dataset)
    found.require_root(config.root)
    # With skip_bad_examples a missing file is one more bad pair, counted and skipped.
    return found.source(config.root, config.split, config.skip_bad_examples)


def class_names(config):
    """The class names of the data set ``config`` reads, without listing or reading
    its images where its reader can (CamVid reads ``class_dict.csv``, "folder"
    ``classes.txt``, ADE20K an ``objectInfo150`` file if there is one, TFRecords their
    metadata), so that a run can be planned before the data set is on disk."""
    return reader(config.dataset).class_info(config.root, config.split)[0]


def palette(config):
    """The display colours [num_classes, 3] of the data set ``config`` reads, without
    its images (as ``class_names``)."""
    return reader(config.dataset).class_info(config.root, config.split)[1]


def _sized_source(config):
    """(source, size): ``size()`` gives (examples, decoded bytes) without decoding anything;
    source is None for TFRecords, whose examples are not files."""
    if reader(config.dataset).records:
        return None, lambda: tfrecords.decoded_size(config.root, config.split)
    source = get_source(config)
    return source, lambda: (len(source.pairs), footprint.decoded_bytes(source))


def _num_examples(config, source):
    if source is None:
        return tfrecords.read_metadata(config.root, config.split)["num_examples"]
    return len(source.pairs)


def _decode(config, source, files, stats, deterministic):
    """Decoded (image uint8 [H, W, 3], stored label) of ``files``, and ``finish``."""
    examples, finish = decode_pairs(files, source, config.skip_bad_examples, stats,
                                    deterministic=deterministic)
    return examples.map(plain(lambda image, label, path: (image, label))), finish


def _paths(source, indices):
    """(image_path, label_path) of each index in ``indices`` (int64 scalars)."""
    # As bytes: a file name that is not UTF-8 (a str with surrogates) is no tf.string.
    images, labels = (tf.constant([os.fsencode(p) for p in column]) for column in
                      zip(*source.pairs))
    return indices.map(plain(lambda i: (tf.gather(images, i), tf.gather(labels, i))))


def _eval_examples(config, stats):
    """(examples in file order, cached as ``config.cache`` says, finish)."""
    source, size = _sized_source(config)
    if source is None:
        examples, finish = tfrecords.read_train_ids(
            config.root, config.split, False, None, True, config.skip_bad_examples,
            stats), as_int32
    else:
        examples, finish = _decode(config, source, pairs_dataset(source.pairs), stats, True)
    return _cache(examples, config, size)[0], finish


def _train_examples(config, stats, seed, start_batch, epochs):
    """(examples, seeds, finish) from global batch ``start_batch`` on, to the end of
    epoch ``epochs`` (None: endless); ``seeds`` (int64 [2] each) pair with them in order.

    Image files without a cache (exact): ``order.file_order`` indices -> paths
    -> decode. Otherwise (approximate): one epoch in the start epoch's order
    (TFRecords: shard order and buffer) -> cache -> shuffle -> repeat, then the
    elements before the start position skipped; they are decoded or read from
    the cache, at most one epoch's worth.
    """
    deterministic = config.deterministic
    source, size = _sized_source(config)
    count = _num_examples(config, source)
    if source is not None and not config.cache:
        per_epoch = order.full_batches(count, config.batch_size)
        files = _paths(source, order.file_order(count, config.batch_size, seed, start_batch,
                                                epochs))
        examples, finish = _decode(config, source, files, stats, deterministic)
        return examples, order.stream_seeds(seed, per_epoch, start_batch * config.batch_size), (
            finish)
    # Without a per-epoch cut the batches run across epochs: the stream is whole epochs.
    per_epoch = count
    first, offset = order.locate(start_batch, config.batch_size, per_epoch)
    shuffle_seed = order.restart_seed(seed, first)
    if source is None:
        examples, finish = tfrecords.read_train_ids(
            config.root, config.split, True, shuffle_seed, deterministic,
            config.skip_bad_examples, stats), as_int32
    else:  # the cache freezes the order it was filled in: the start epoch's
        files = _paths(source, tf.data.Dataset.from_tensor_slices(
            order.epoch_permutation(count, seed, first)))
        examples, finish = _decode(config, source, files, stats, deterministic)
    examples, in_memory = _cache(examples, config, size)
    order.full_batches(count, config.batch_size)  # after the cache check: its error first
    # In memory: references into the cache, so a buffer of the whole split is cheap.
    buffer = max(in_memory, 1) if in_memory is not None else config.shuffle_buffer
    examples = examples.shuffle(buffer, seed=shuffle_seed, reshuffle_each_iteration=True)
    examples = examples.repeat(None if epochs is None else max(epochs - first, 0)).skip(offset)
    return examples, order.stream_seeds(seed, per_epoch, start_batch * config.batch_size), finish


def _cache(examples, config, size):
    """(examples cached as ``config.cache`` says, the number of examples if in memory)."""
    if config.cache is True:
        count, estimate = size()
        footprint.require_cache_fits(f"the {config.dataset} {config.split} split in {config.root}",
                                     count, estimate, config.cache_max_gb)
        return examples.cache(), count
    return (examples.cache(config.cache) if config.cache else examples), None


def _train_batches(config, stats, start_batch, epochs):
    """The augmented training batches from global batch ``start_batch`` on."""
    seed = order.resolve_seed(config.seed)
    examples, seeds, finish = _train_examples(config, stats, seed, start_batch, epochs)

    def augment(example, element_seed):
        return train_transform(example[0], example[1], element_seed, config.crop_size,
                               config.scale_range, config.flip, config.jitter, finish)

    # The seeds are paired with the examples before the parallel map: every element's
    # augmentation is fixed by its position, under any parallelism.
    return tf.data.Dataset.zip(examples, seeds).map(
        plain(augment), num_parallel_calls=tf.data.AUTOTUNE, deterministic=config.deterministic,
    ).batch(config.batch_size, drop_remainder=True)


def _eval_batches(config, stats):
    """The full-size evaluation batches in file order, padded to a common size."""
    examples, finish = _eval_examples(config, stats)
    return examples.map(plain(lambda image, label: eval_transform(image, finish(label))),
                        num_parallel_calls=tf.data.AUTOTUNE,
                        deterministic=True).padded_batch(
        config.batch_size, padding_values=(tf.constant(PAD_VALUE, tf.uint8), IGNORE_LABEL))


def build_dataset(config, training, stats=None, start_batch=0, epochs=None):
    """The batched dataset for ``config``.

    Images stay uint8 up to the device (4x fewer bytes to copy than float32):
    the model's caller normalises them there with ``tfseg.models.normalize``
    (the train step and ``Predictor`` do).

    Training is an endless stream of epochs (``epochs`` bounds it) that can
    start at any global batch index: the order of epoch ``e`` and the
    augmentation of its ``p``-th element depend only on (seed, e, p), and the
    skip drops file indices before any file is read. With ``config.seed`` set
    and ``config.deterministic``, on image files without a cache, the batches
    from ``start_batch=N`` are bitwise batches N, N+1, ... of the stream from
    0. Only approximately elsewhere, though the start position is still
    skipped to and each start epoch gets its own shuffle seed, so a resumed
    run does not replay the first epoch's start:
      * ``cache``: the cache holds the start epoch's order; epochs after it are
        reshuffled by a stateful shuffle; the skipped elements are read (from
        files while the cache fills), up to one epoch of them.
      * TFRecords: shard order and ``shuffle_buffer`` are stateful shuffles; the
        skipped records are read and decoded, up to one epoch of them.
      * ``deterministic=False``: the parallel augmentation may reorder elements
        within a few batches (each element keeps its own augmentation).
      * ``skip_bad_examples``: a dropped file shifts every later element.
      * ``data_service``: exact with one worker; with several, each runs the
        whole stream and batches arrive in the order workers deliver them.
      * ``seed=None``: a fresh seed per call, so a resumed run has a new order.

    Args:
      config: a ``DataConfig``.
      training: augment and shuffle (crops of ``config.crop_size``), else full
        images, always in file order, one pass (``config.deterministic`` is implied).
      stats: optional ``DataStats`` to count bad examples and unknown label
        pixels (not with ``data_service``: the counting would happen remotely).
        ``build_dataset_with_stats`` makes one for you.
      start_batch: training: the global batch index to start at (e.g. the
        number of batches a resumed run has already consumed).
      epochs: training: end after epoch ``epochs - 1`` (counted from 0), i.e.
        ``epochs * (examples // batch_size)`` batches from 0 on image files
        without a cache; None (default): never.

    Returns:
      tf.data.Dataset of (image uint8 [B, H, W, 3], label int32 [B, H, W] with
      class ids or 255 = ignore). Evaluation pads images of different sizes
      with ``transforms.PAD_VALUE`` (label 255).
    """
    if stats is not None and config.data_service:
        raise ValueError("DataStats cannot count on tf.data service workers")
    batches = (_train_batches(config, stats, start_batch, epochs) if training
               else _eval_batches(config, stats))
    if config.data_service:
        require_reachable(config.data_service, config.data_service_timeout)
        batches = batches.apply(tf.data.experimental.service.distribute(
            processing_mode="parallel_epochs", service=config.data_service))
    options = tf.data.Options()
    options.deterministic = config.deterministic or not training
    return batches.prefetch(tf.data.AUTOTUNE).with_options(options)


def build_dataset_with_stats(config, training, start_batch=0, epochs=None):
    """``(build_dataset(config, training, stats, start_batch, epochs), stats)`` with a new
    ``DataStats``.

    The counts fill in as the dataset is iterated: log ``stats.summary()``
    or ``stats.as_dict()`` whenever convenient. ``stats`` is None with
    ``config.data_service`` (workers cannot update this process's counters).
    """
    stats = None if config.data_service else DataStats()
    return build_dataset(config, training, stats, start_batch, epochs), stats
