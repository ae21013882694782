"""Build the tf.data input pipeline from a ``DataConfig``.

Order of stages (training): file list -> shuffle the whole file list (every
epoch, before decoding: Cityscapes files are sorted by city, so anything less
global would fill a batch from one or two cities) -> parallel
read+decode+label mapping -> [cache -> shuffle] -> augment with per-element
stateless seeds -> batch -> [tf.data service] -> prefetch. TFRecords shuffle
their shard order, interleave shards, then use a ``shuffle_buffer``.

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

from tfseg.data import camvid, cityscapes, footprint, tfrecords, voc
from tfseg.data.decode import decode_pairs, pairs_dataset
from tfseg.data.source import IGNORE_LABEL, Source, as_int32
from tfseg.data.stats import DataStats
from tfseg.data.synthetic import write_synthetic_cityscapes
from tfseg.data.transforms import eval_transform, train_transform
from tfseg.errors import InputError

_READERS = {"cityscapes": cityscapes.source, "voc": voc.source, "camvid": camvid.source}


def get_source(config):
    """The ``Source`` (files, classes, palette) that ``config`` reads.

    For "tfrecord" the pairs are empty and the classes come from the metadata.
    """
    if config.dataset == "tfrecord":
        meta = tfrecords.read_metadata(config.root, config.split)
        return Source(meta["source"], (), tuple(meta["class_names"]),
                      tf.constant(meta["palette"], tf.uint8).numpy(), None, None, "")
    if config.dataset == "synthetic":
        write_synthetic_cityscapes(config.root)
        return cityscapes.source(config.root, config.split)
    return _READERS[config.dataset](config.root, config.split)


def class_names(config):
    """The class names of the data set ``config`` reads, without listing or reading
    its images (CamVid reads ``class_dict.csv``, TFRecords their metadata), so that
    a run can be planned before the data set is on disk."""
    if config.dataset == "camvid":
        return camvid.read_class_dict(os.path.join(config.root, "class_dict.csv"))[0]
    if config.dataset == "tfrecord":
        return tuple(tfrecords.read_metadata(config.root, config.split)["class_names"])
    return voc.CLASS_NAMES if config.dataset == "voc" else cityscapes.CLASS_NAMES


def _examples(config, training, stats):
    """(examples, finish, size): decoded (image uint8 [H, W, 3], label) in file or shuffled order.

    Labels come as stored ids where the source allows it; ``finish(label)``
    maps them to int32 train ids, and is applied after the crop in training
    (a per-pixel lookup commutes with nearest-neighbour cropping).
    ``size()`` gives (examples, decoded bytes) without decoding anything.
    """
    deterministic = config.deterministic or not training
    if config.dataset == "tfrecord":
        examples = tfrecords.read_train_ids(config.root, config.split, training, config.seed,
                                            deterministic, config.skip_bad_examples, stats)
        return examples, as_int32, lambda: tfrecords.decoded_size(config.root, config.split)
    source = get_source(config)
    files = pairs_dataset(source.pairs)
    if training:  # paths only: shuffling the whole list costs nothing
        files = files.shuffle(len(source.pairs), seed=config.seed, reshuffle_each_iteration=True)
    examples, finish = decode_pairs(files, source, config.skip_bad_examples, stats,
                                    deterministic=deterministic)
    return (examples.map(lambda image, label, path: (image, label)), finish,
            lambda: (len(source.pairs), footprint.decoded_bytes(source)))


def _cache(examples, config, size):
    """(examples cached as ``config.cache`` says, the number of examples if in memory)."""
    if config.cache is True:
        count, estimate = size()
        footprint.require_cache_fits(f"the {config.dataset} {config.split} split in {config.root}",
                                     count, estimate, config.cache_max_gb)
        return examples.cache(), count
    return (examples.cache(config.cache) if config.cache else examples), None


def build_dataset(config, training, stats=None):
    """The batched dataset for ``config``.

    Args:
      config: a ``DataConfig``.
      training: augment and shuffle (crops of ``config.crop_size``), else full
        images, always in file order (``config.deterministic`` is implied).
      stats: optional ``DataStats`` to count bad examples and unknown label
        pixels (not with ``data_service``: the counting would happen remotely).
        ``build_dataset_with_stats`` makes one for you.

    Returns:
      tf.data.Dataset of (image float32 [B, H, W, 3] in [-1, 1],
      label int32 [B, H, W] with class ids or 255 = ignore).
    """
    if stats is not None and config.data_service:
        raise ValueError("tfseg: DataStats cannot count on tf.data service workers")
    examples, finish, size = _examples(config, training, stats)
    examples, in_memory = _cache(examples, config, size)
    if training:
        if in_memory is not None:  # references into the cache: the whole split is cheap
            examples = examples.shuffle(max(in_memory, 1), seed=config.seed,
                                        reshuffle_each_iteration=True)
        elif config.cache or config.dataset == "tfrecord":
            examples = examples.shuffle(config.shuffle_buffer, seed=config.seed,
                                        reshuffle_each_iteration=True)

        def augment(example, seed):
            return train_transform(example[0], example[1], seed, config.crop_size,
                                   config.scale_range, config.flip, config.jitter, finish)

        # One stateless seed per element: reproducible under any parallelism.
        seeds = tf.data.Dataset.random(seed=config.seed, rerandomize_each_iteration=True).batch(2)
        batches = tf.data.Dataset.zip(examples, seeds).map(
            augment, num_parallel_calls=tf.data.AUTOTUNE, deterministic=config.deterministic,
        ).batch(config.batch_size, drop_remainder=True)
    else:
        batches = examples.map(lambda image, label: eval_transform(image, finish(label)),
                               num_parallel_calls=tf.data.AUTOTUNE,
                               deterministic=True).padded_batch(
            config.batch_size, padding_values=(0.0, IGNORE_LABEL))
    if config.data_service:
        batches = batches.apply(tf.data.experimental.service.distribute(
            processing_mode="parallel_epochs", service=config.data_service))
    options = tf.data.Options()
    options.deterministic = config.deterministic or not training
    return batches.prefetch(tf.data.AUTOTUNE).with_options(options)


def build_dataset_with_stats(config, training):
    """``(build_dataset(config, training, stats), stats)`` with a new ``DataStats``.

    The counts fill in as the dataset is iterated: log ``stats.summary()``
    or ``stats.as_dict()`` whenever convenient. ``stats`` is None with
    ``config.data_service`` (workers cannot update this process's counters).
    """
    stats = None if config.data_service else DataStats()
    return build_dataset(config, training, stats), stats


def distribute(dataset, strategy, device=None):
    """Distribute ``dataset`` with ``strategy``, prefetching batches onto the device, so
    the host->device copy overlaps the step.

    A real strategy does it with ``InputOptions(experimental_fetch_to_device=True)``.
    The default strategy (no ``tf.distribute`` scope) returns the dataset unchanged
    from ``experimental_distribute_dataset``, so batches would reach the GPU only when
    the step reads them: it gets ``prefetch_to_device`` onto ``device`` (default: the
    first GPU; none on a machine without one, where batches are already on the CPU).
    """
    if not tf.distribute.has_strategy() and strategy is tf.distribute.get_strategy():
        gpus = tf.config.list_logical_devices("GPU")
        device = device or (gpus[0].name if gpus else None)
        return dataset.apply(tf.data.experimental.prefetch_to_device(device)) if device else (
            dataset)
    return strategy.experimental_distribute_dataset(
        dataset, tf.distribute.InputOptions(experimental_fetch_to_device=True))


# The pipeline's own checks (decode.py, tfrecords.py) fail through tf.debugging.Assert
# with this marker before the message that names the file(s).
_ASSERT_MARK = "[tfseg:] ["
_DATA_ERRORS = (tf.errors.InvalidArgumentError, tf.errors.NotFoundError, tf.errors.DataLossError)


def iterate(dataset):
    """Yields the elements of ``dataset`` (a dataset, or a distributed one).

    A file that the pipeline cannot read, decode or pair stops it with an
    ``InputError`` whose one-line message names the file(s), instead of TF's
    multi-line op error.
    """
    iterator = iter(dataset)
    while True:
        try:
            element = next(iterator)
        except StopIteration:
            return
        except _DATA_ERRORS as error:
            raise InputError(_data_error_message(error)) from None
        yield element


def _data_error_message(error):
    text = error.message
    start = text.find(_ASSERT_MARK)
    if start < 0:  # e.g. a file removed after the file list was made
        return f"tfseg: input pipeline: {text.strip().splitlines()[0]}"
    body = text[start + len(_ASSERT_MARK):].split("\n", 1)[0].rstrip()
    return "tfseg: " + (body[:-1] if body.endswith("]") else body)
