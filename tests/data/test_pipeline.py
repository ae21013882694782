import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tfseg.data import (DataConfig, DataStats, build_dataset, build_dataset_with_stats,
                        distribute, get_source, transforms)
from tfseg.errors import InputError
from tests.data.trees import cityscapes_tree, voc_tree


def _config(root, **kwargs):
    return DataConfig(**{**dict(dataset="cityscapes", root=root, crop_size=(32, 48),
                                batch_size=2, seed=5, deterministic=True), **kwargs})


def _arrays(dataset):
    return [(i.numpy(), l.numpy()) for i, l in dataset]


def _training(config, epochs=1, **kwargs):
    """The training batches of ``epochs`` epochs (the dataset alone is endless)."""
    return _arrays(build_dataset(config, training=True, epochs=epochs, **kwargs))


def test_training_batches_contract(synthetic_root):
    dataset = build_dataset(_config(synthetic_root, jitter=True), training=True, epochs=1)
    # uint8 up to the device: the element spec says so before anything is read.
    assert [spec.dtype for spec in dataset.element_spec] == [tf.uint8, tf.int32]
    batches = _arrays(dataset)
    assert len(batches) == 3  # 6 images, remainder dropped
    for image, label in batches:
        assert image.shape == (2, 32, 48, 3) and image.dtype == np.uint8
        assert label.shape == (2, 32, 48) and label.dtype == np.int32
        assert image.min() < 100 and image.max() > 150  # pixels, not a normalised range
        assert set(np.unique(label)) <= {0, 1, 2, 7, 8, 10, 11, 13, 255}


def test_seeded_deterministic_training_is_reproducible_and_epochs_differ(synthetic_root):
    both = _training(_config(synthetic_root), epochs=2)
    epoch1, epoch2 = both[:3], both[3:]
    again = _training(_config(synthetic_root))
    assert len(epoch2) == len(again) == 3
    for (a, b), (c, d) in zip(epoch1, again):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
    assert not all(np.array_equal(a, c) for (a, _), (c, _) in zip(epoch1, epoch2))


def test_eval_is_full_images_in_file_order(synthetic_root):
    dataset = build_dataset(_config(synthetic_root, split="val"), training=False)
    assert dataset.element_spec[0].dtype == tf.uint8
    batches = _arrays(dataset)
    assert [b[0].shape for b in batches] == [(2, 48, 80, 3), (1, 48, 80, 3)]


def test_eval_pads_images_of_different_sizes(tmp_path):
    labels = voc_tree(tmp_path)
    config = DataConfig(dataset="voc", root=str(tmp_path), split="train", batch_size=2)
    (image, label), = _arrays(build_dataset(config, training=False))
    assert image.shape == (2, 12, 14, 3) and label.shape == (2, 12, 14)
    np.testing.assert_array_equal(label[1, :, :9], labels[1])
    # Padded with mid-grey (what the model sees as ~0), not black.
    assert np.all(label[1, :, 9:] == 255) and np.all(image[1, :, 9:] == transforms.PAD_VALUE)
    assert image.dtype == np.uint8 and np.any(image[1, :, :9] != transforms.PAD_VALUE)


def test_cache_gives_the_same_eval_batches(synthetic_root, tmp_path):
    plain = _arrays(build_dataset(_config(synthetic_root), training=False))
    for cache in (True, str(tmp_path / "cache")):
        cached = build_dataset(_config(synthetic_root, cache=cache), training=False)
        for _ in range(2):
            for (a, b), (c, d) in zip(plain, _arrays(cached)):
                np.testing.assert_array_equal(a, c)
                np.testing.assert_array_equal(b, d)
    assert len(_training(_config(synthetic_root, cache=True))) == 3


def test_synthetic_kind_writes_then_reads(tmp_path):
    config = DataConfig(dataset="synthetic", root=str(tmp_path), split="val", batch_size=5)
    assert get_source(config).num_classes == 19
    image, label = _arrays(build_dataset(config, training=False))[0]
    assert image.shape == (5, 128, 256, 3)


@pytest.mark.parametrize("training", [True, False])
def test_build_dataset_with_stats_counts_unknown_label_ids(tmp_path, training):
    cityscapes_tree(tmp_path, ids=list(range(34)) + [40, 200], n=3)  # 12x16 = 36 * 5 + 12
    config = _config(str(tmp_path), crop_size=(8, 8), batch_size=1)
    dataset, stats = build_dataset_with_stats(config, training, epochs=1)
    assert stats.as_dict()["unknown_label_pixels"] == 0  # counted as the data is read
    assert len(list(dataset)) == 3
    # 40 and 200 sit at cycle positions 34 and 35 of 36: 5 pixels each per image,
    # counted on the whole stored label even when training reads only a crop.
    assert stats.as_dict() == dict(bad_examples=0, unknown_label_pixels=3 * 10,
                                   unknown_label_examples=3)
    assert "unknown ids" in stats.summary()


def test_distribute_keeps_the_input_options(synthetic_root):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    dataset = distribute(build_dataset(_config(synthetic_root), training=True), strategy)
    # The options the distributed dataset was built with (no public accessor).
    assert dataset._options.experimental_fetch_to_device is True
    image, label = next(iter(dataset))
    assert image.shape == (2, 32, 48, 3) and label.shape == (2, 32, 48)


def test_batches_arrive_on_the_named_device_as_uint8(synthetic_root):
    dataset = build_dataset(_config(synthetic_root), training=True)
    image, label = next(iter(distribute(dataset, tf.distribute.get_strategy(), "/cpu:0")))
    assert image.device.endswith("device:CPU:0") and image.dtype == tf.uint8
    assert label.device.endswith("device:CPU:0") and label.dtype == tf.int32


# Two logical CPUs make "device" and "host" differ without a GPU; they must be
# configured before TF starts, hence a fresh process.
_DEVICE_SCRIPT = """
import sys
import tensorflow as tf
cpu, = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from tfseg.data import DataConfig, build_dataset, distribute
strategy = tf.distribute.OneDeviceStrategy("/cpu:1")
dataset = build_dataset(DataConfig(root=sys.argv[1], crop_size=(32, 48), batch_size=2), True)
host = strategy.experimental_distribute_dataset(
    dataset, tf.distribute.InputOptions(experimental_fetch_to_device=False))
for distributed in (distribute(dataset, strategy), host):
    image, label = next(iter(distributed))
    print(image.device, label.device, image.dtype.name)
"""


def test_distribute_prefetches_onto_the_strategy_device(synthetic_root):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run([sys.executable, "-c", _DEVICE_SCRIPT, synthetic_root],
                            cwd=root, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-2000:]
    fetched, hosted = [line.split() for line in result.stdout.strip().splitlines()[-2:]]
    assert all(d.endswith("device:CPU:1") for d in fetched[:2]), fetched
    # Without fetch_to_device the batches stay on the host: the check above can fail.
    assert all(d.endswith("device:CPU:0") for d in hosted[:2]), hosted
    assert fetched[2] == hosted[2] == "uint8"  # what crosses to the device: 1 byte a channel


def test_data_service_elements_equal_local(synthetic_root):
    service = tf.data.experimental.service
    dispatcher = service.DispatchServer(service.DispatcherConfig(port=0))
    address = dispatcher.target.split("://")[1]
    worker = service.WorkerServer(service.WorkerConfig(  # noqa: F841  (kept alive)
        dispatcher_address=address, worker_address="localhost:%port%", port=0))
    assert address.startswith("localhost:")
    for training in (True, False):
        local = _arrays(build_dataset(_config(synthetic_root), training, epochs=2))
        remote = _arrays(build_dataset(_config(synthetic_root, data_service=dispatcher.target),
                                       training, epochs=2))
        assert len(local) == len(remote) > 0
        for (a, b), (c, d) in zip(local, remote):
            np.testing.assert_array_equal(a, c)
            np.testing.assert_array_equal(b, d)
    # This process cannot count what the workers decode: no stats to read.
    assert build_dataset_with_stats(_config(synthetic_root, data_service=dispatcher.target),
                                    True)[1] is None


def test_config_validation_and_stats_with_service(synthetic_root):
    with pytest.raises(InputError, match="dataset"):
        DataConfig(dataset="coco")
    with pytest.raises(InputError, match="grpc"):
        DataConfig(data_service="localhost:5000")
    with pytest.raises(ValueError, match="service"):
        build_dataset(_config(synthetic_root, data_service="grpc://localhost:1"), True,
                      DataStats())


def test_an_unreachable_data_service_is_one_line_naming_it(synthetic_root):
    """With no dispatcher at the address, tf.data would wait for ever in silence."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    address = f"grpc://127.0.0.1:{closed.getsockname()[1]}"
    closed.close()  # nothing listens there now
    start = time.perf_counter()
    with pytest.raises(InputError, match=f"^--data_service: no tf.data service dispatcher "
                                         f"answers at {address} within 2 s"):
        build_dataset(_config(synthetic_root, data_service=address,
                              data_service_timeout=2.0), True)
    assert time.perf_counter() - start < 10


_PLACEMENT = """
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from tfseg.data import distribute
dataset = tf.data.Dataset.from_tensors((tf.zeros([2, 5, 7, 3]), tf.zeros([2, 5, 7], tf.int32)))
default = next(iter(distribute(dataset.repeat(), tf.distribute.get_strategy(), "/cpu:1")))
one = tf.distribute.OneDeviceStrategy("/cpu:1")
single = next(iter(distribute(dataset.repeat(), one)))
print(default[0].device, default[1].device, single[0].device)
"""


def test_batches_reach_the_intended_device():
    """With the default strategy, ``experimental_distribute_dataset`` returns the dataset
    unchanged (nothing would be prefetched to a GPU); ``distribute`` prefetches onto the
    named device then, and a strategy's device otherwise. Two logical CPUs stand in for a
    GPU: a fresh process, since logical devices must be set before TensorFlow starts."""
    proc = subprocess.run([sys.executable, "-c", _PLACEMENT], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    devices = proc.stdout.split()
    assert len(devices) == 3 and all(d.endswith("/device:CPU:1") for d in devices), devices
