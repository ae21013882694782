"""Training resumes its input at a global batch index: exactly on image files, skipping
without reading, and at least to the right place with a cache or TFRecords."""

import re

import numpy as np
import pytest
import tensorflow as tf

from tfseg.data import DataConfig, build_dataset, get_source, order, write_tfrecords
from tests.data.trees import cityscapes_tree

# 7 pairs in batches of 2: 3 batches an epoch, one file left over each epoch.
_FILES, _BATCH = 7, 2


def _config(root, **kwargs):
    return DataConfig(**{**dict(dataset="cityscapes", root=str(root), crop_size=(9, 11),
                                batch_size=_BATCH, jitter=True, seed=5, deterministic=True),
                         **kwargs})


def _arrays(dataset):
    return [(i.numpy(), l.numpy()) for i, l in dataset]


def _assert_same(got, want):
    assert len(got) == len(want) > 0
    for (a, b), (c, d) in zip(got, want):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)


@pytest.fixture
def tree(tmp_path):
    cityscapes_tree(tmp_path, size=(13, 17), n=_FILES)
    return tmp_path


@pytest.mark.slow
def test_resumed_batches_equal_the_unbroken_stream(tree):
    config = _config(tree)
    unbroken = _arrays(build_dataset(config, True, epochs=3))
    assert len(unbroken) == 9
    # Each epoch has its own order and augmentation: a resume must not replay epoch 0.
    assert not np.array_equal(unbroken[0][0], unbroken[3][0])
    for start in (2, 4, 5):  # 2 and 5 cross an epoch boundary
        resumed = _arrays(build_dataset(config, True, start_batch=start).take(3))
        _assert_same(resumed, unbroken[start:start + 3])
    # Bounded: up to the end of the last epoch, from wherever it started.
    assert len(_arrays(build_dataset(config, True, start_batch=4, epochs=3))) == 5


@pytest.mark.slow  # 26.5 s in CI
def test_the_skip_reads_none_of_the_skipped_files(tree):
    """Batch 4 is the second of epoch 1: the files of epoch 1's first batch, and the one
    left over at its end, are made unreadable. Strict mode raises on any file it reads
    (the control, from batch 3, does), so a resume at 4 never opened them."""
    config = _config(tree)
    pairs = get_source(config).pairs
    epoch1 = order.epoch_permutation(_FILES, config.seed, 1).numpy()
    for index in list(epoch1[:_BATCH]) + [epoch1[-1]]:
        with open(pairs[index][0], "wb") as f:
            f.write(b"not an image")
    assert len(_arrays(build_dataset(config, True, start_batch=4, epochs=2))) == 2
    skipped = "|".join(re.escape(pairs[i][0]) for i in epoch1[:_BATCH])
    with pytest.raises(tf.errors.InvalidArgumentError, match=skipped):
        _arrays(build_dataset(config, True, start_batch=3, epochs=2))


def test_an_unseeded_run_draws_its_own_order(tree):
    first, second = (_arrays(build_dataset(_config(tree, seed=None), True, epochs=1))
                     for _ in range(2))
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(first, second))


# The TFRecord case writes shards first: 24 s in a loaded CI run.
@pytest.mark.parametrize("kind", ["memory", "file",
                                  pytest.param("tfrecord", marks=pytest.mark.slow)])
def test_cached_and_tfrecord_inputs_skip_to_the_start(tree, tmp_path_factory, kind):
    """Approximate paths: batches run across epochs (7 elements an epoch), epochs after
    the first are reshuffled statefully; the start epoch's order and the skip are exact."""
    if kind == "tfrecord":
        out = str(tmp_path_factory.mktemp("rec"))
        write_tfrecords(get_source(_config(tree)), out, "train", num_shards=3)
        config = _config(out, dataset="tfrecord")
    else:
        cache = True if kind == "memory" else str(tmp_path_factory.mktemp("cache") / "c")
        config = _config(tree, cache=cache)
    unbroken = _arrays(build_dataset(config, True, epochs=2))
    assert len(unbroken) == 2 * _FILES // _BATCH
    _assert_same(_arrays(build_dataset(config, True, start_batch=1, epochs=1)), unbroken[1:3])
    # From batch 4 (epoch 1): the rest of the second epoch, not the first from its start.
    assert len(_arrays(build_dataset(config, True, start_batch=4, epochs=2))) == 3
