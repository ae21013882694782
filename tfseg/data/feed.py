"""How batches reach the step: from a tf.data service dispatcher, onto the device,
iteration that names the bad file on a data error, and pairs for `model.fit`."""

import socket

import tensorflow as tf

from tfseg.data.traced import plain
from tfseg.errors import InputError
from tfseg.layers.pixels import normalize


def require_reachable(address, timeout):
    """Raises a one-line ``InputError`` naming ``address`` unless something accepts a
    connection there within ``timeout`` seconds: with no dispatcher, tf.data would wait
    for ever without a word."""
    host, _, port = address[len("grpc://"):].rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except (OSError, ValueError) as error:
        raise InputError(f"--data_service: no tf.data service dispatcher answers at {address} "
                         f"within {timeout:g} s ({error})") from None


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


# Where the pipeline does not skip bad files already, the error says how to.
SKIP_HINT = " (--skip_bad_examples skips such files, naming and counting each)"


def iterate(dataset, skipping=False):
    """Yields the elements of ``dataset`` (a dataset, or a distributed one).

    A file that the pipeline cannot read, decode or pair stops it with an
    ``InputError`` whose one-line message names the file(s), instead of TF's
    multi-line op error, and, unless ``skipping`` (the pipeline's
    ``skip_bad_examples``), says that ``--skip_bad_examples`` would skip it.

    Example:
        for images, labels in iterate(build_dataset(data, training=False)):
            ...
    """
    iterator = iter(dataset)
    while True:
        try:
            element = next(iterator)
        except StopIteration:
            return
        except _DATA_ERRORS as error:
            raise InputError(_data_error_message(error) + ("" if skipping else SKIP_HINT)) from None
        yield element


def _data_error_message(error):
    text = error.message
    start = text.find(_ASSERT_MARK)
    if start < 0:  # e.g. a file removed after the file list was made
        return f"input pipeline: {text.strip().splitlines()[0]}"
    body = text[start + len(_ASSERT_MARK):].split("\n", 1)[0].rstrip()
    return body[:-1] if body.endswith("]") else body


def as_fit_pairs(dataset):
    """``build_dataset``'s batches as ``model.fit`` and ``model.evaluate`` take them: (images
    normalised to [-1, 1] by ``tfseg.models.normalize``, labels), mapped on the host.

    tfseg's model takes normalised images (as ``keras.applications`` models take
    ``preprocess_input``'s); tfseg's own step normalises uint8 on the device instead, to
    copy 1 byte a channel, not 4 (6 MB more per 1024x2048 image here).
    """
    return dataset.map(plain(lambda images, labels: (normalize(images), labels)),
                       num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
