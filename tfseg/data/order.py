"""The training order as a pure function of (seed, epoch, position), so a run can resume.

A ``Dataset.shuffle(reshuffle_each_iteration=True)`` draws each epoch's order
from a seed generator that advances with every pass: a restarted process
starts it again from the first epoch's order. Here every epoch's file order
is ``stateless_shuffle`` keyed by (seed, epoch), and every element's
augmentation seed is keyed by (seed, epoch, position in the epoch), so the
stream from any global batch index on can be rebuilt without replaying what
came before it; skipping happens on the list of file indices, before any file
is read.

All randomness uses the Philox algorithm by name: "auto_select" may pick
another algorithm on another device, and the test that recomputes an order
eagerly must get the one the (CPU) input pipeline drew.
"""

import random

import tensorflow as tf

from tfseg.data.traced import plain
from tfseg.errors import InputError

_ALG = "philox"
# Separate key streams: a file order and an augmentation seed never share a key.
_ORDER, _AUGMENT = 1, 2


def resolve_seed(seed):
    """``seed`` as an int; a fresh random one for None (then every run differs)."""
    return random.SystemRandom().randrange(2**31) if seed is None else int(seed)


def _key(seed, stream, epoch):
    """int64 [2]: the stateless key of ``stream`` in ``epoch``."""
    base = tf.constant([stream, seed], tf.int64)
    return tf.random.experimental.stateless_fold_in(base, tf.cast(epoch, tf.int64), alg=_ALG)


def epoch_permutation(num_files, seed, epoch):
    """int64 [num_files]: the file indices in ``epoch``'s training order.

    Args:
      num_files: size of the file list; seed: int; epoch: int or int64 scalar tensor.
    """
    return tf.random.experimental.stateless_shuffle(tf.range(num_files, dtype=tf.int64),
                                                    _key(seed, _ORDER, epoch), alg=_ALG)


def element_seed(seed, epoch, position):
    """int64 [2]: the augmentation seed of the element at ``position`` of ``epoch``."""
    return tf.random.experimental.stateless_fold_in(_key(seed, _AUGMENT, epoch),
                                                    tf.cast(position, tf.int64), alg=_ALG)


def full_batches(num_examples, batch_size):
    """Examples a training epoch uses: whole batches only (the remainder is left out).

    Raises ``InputError`` when there is not one batch: an endless stream of
    empty epochs would hang the run instead.
    """
    if num_examples < batch_size:
        raise InputError(f"training needs at least batch_size={batch_size} examples, "
                         f"the split has {num_examples:,}")
    return num_examples // batch_size * batch_size


def locate(start_batch, batch_size, per_epoch):
    """(epoch, position) of the first element of global batch ``start_batch`` in a stream
    of epochs of ``per_epoch`` elements each."""
    if start_batch < 0:
        raise ValueError(f"start_batch must be >= 0, got {start_batch}")
    return divmod(start_batch * batch_size, per_epoch)


def _epochs(first, end):
    """int64 epoch numbers [first, end), or from ``first`` on for ``end=None``."""
    if end is None:
        return tf.data.Dataset.counter(first, dtype=tf.int64)
    return tf.data.Dataset.range(first, max(first, end), dtype=tf.int64)


def file_order(num_files, batch_size, seed, start_batch=0, epochs=None):
    """File indices in training order from global batch ``start_batch`` on.

    Epoch ``e`` is ``epoch_permutation(num_files, seed, e)`` cut to its whole
    batches, so batches never straddle epochs and batch ``b`` is the same
    files whatever came before. Skipping costs nothing: it drops indices of
    the start epoch before any file is read.

    Args:
      num_files: size of the file list; batch_size: examples per batch.
      seed: int; start_batch: global batch index to start at.
      epochs: stop at the end of this epoch (counted from 0), or None: never.

    Returns:
      Dataset of int64 scalars (indices into the file list).
    """
    per_epoch = full_batches(num_files, batch_size)
    first, offset = locate(start_batch, batch_size, per_epoch)
    order = _epochs(first, epochs).flat_map(plain(lambda epoch: tf.data.Dataset.from_tensor_slices(
        epoch_permutation(num_files, seed, epoch)[:per_epoch])))
    return order.skip(offset)


def stream_seeds(seed, per_epoch, start):
    """Augmentation seeds (int64 [2]) of elements ``start``, ``start + 1``, ... of a stream
    of epochs of ``per_epoch`` elements: element ``g`` gets
    ``element_seed(seed, g // per_epoch, g % per_epoch)``."""
    return tf.data.Dataset.counter(start, dtype=tf.int64).map(plain(
        lambda g: element_seed(seed, g // per_epoch, g % per_epoch)))


def restart_seed(seed, epoch):
    """An int seed for the stateful shuffles of the approximate paths (cache, TFRecords),
    different per start epoch so that a resumed run does not replay the first epoch's
    order."""
    return (seed * 1_000_003 + epoch) % (2**31 - 1)
