import json
import os
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest
import tensorflow as tf

from tfseg.data import (DataConfig, DataStats, build_dataset, build_dataset_with_stats,
                        get_source, transforms)
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


@pytest.mark.slow  # 10-23 s: more than its share of the fast tier's 12 minutes
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
    assert stats.summary("train") is None  # nothing to say yet
    assert len(list(dataset)) == 3
    # 40 and 200 sit at cycle positions 34 and 35 of 36: 5 pixels each per image,
    # counted on the whole stored label even when training reads only a crop.
    assert stats.as_dict() == dict(bad_examples=0, unknown_label_pixels=3 * 10,
                                   unknown_label_examples=3)
    assert "unknown ids" in stats.summary("train")


# Where batches land, read in one fresh process with two logical CPUs (fixed when TF
# starts): "/cpu:1" stands in for a GPU, "/cpu:0" is the host, so a batch left on the
# host is told apart from one placed on the device. Each case beside its control.
_PLACEMENTS = """
import json, sys
import tensorflow as tf
from tests.split.on_devices import _logical_cpus
_logical_cpus(2)
from tfseg.data import DataConfig, build_dataset, distribute
dataset = build_dataset(DataConfig(root=sys.argv[1], crop_size=(32, 48), batch_size=2,
                                   seed=5, deterministic=True), True)
one = tf.distribute.OneDeviceStrategy("/cpu:1")
two = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
on_host = tf.distribute.InputOptions(experimental_fetch_to_device=False)
default = tf.distribute.get_strategy()
distributed = {
    "named": distribute(dataset, default, "/cpu:1"),
    "unnamed": distribute(dataset, default),
    "strategy": distribute(dataset, one),
    "strategy_host": one.experimental_distribute_dataset(dataset, on_host),
    "replicas": distribute(dataset, two),
    "replicas_host": two.experimental_distribute_dataset(dataset, on_host),
}
def where(t):
    return [t.device.split("device:")[-1], t.dtype.name, list(t.shape)]
out = {}
for case, data in distributed.items():
    image, label = next(iter(data))
    out[case] = [[where(t) for t in (getattr(image, "values", None) or (image,))],
                 [where(t) for t in (getattr(label, "values", None) or (label,))]]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def placements(synthetic_root):
    """{case: ([image per replica], [label per replica])}, each [device, dtype, shape]."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run([sys.executable, "-c", _PLACEMENTS, synthetic_root],
                            cwd=root, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_batches_arrive_on_the_named_device_as_uint8(placements):
    """The default strategy (no ``tf.distribute`` scope) with a named device."""
    (image,), (label,) = placements["named"]
    assert image == ["CPU:1", "uint8", [2, 32, 48, 3]]
    assert label == ["CPU:1", "int32", [2, 32, 48]]
    # Unnamed, with no GPU, they stay on the host: the device above was not by chance.
    (image,), (label,) = placements["unnamed"]
    assert image[0] == label[0] == "CPU:0"


def test_batches_reach_the_intended_device(placements):
    """With the default strategy, ``experimental_distribute_dataset`` returns the dataset
    unchanged (nothing would be prefetched to a GPU); ``distribute`` prefetches onto the
    named device then, and a strategy's device otherwise."""
    (fetched,), (fetched_label,) = placements["strategy"]
    assert fetched[0] == fetched_label[0] == "CPU:1", placements["strategy"]
    (named,), (named_label,) = placements["named"]
    assert named[0] == named_label[0] == "CPU:1", placements["named"]
    # Without fetch_to_device the batches stay on the host: the check above can fail.
    (hosted,), (hosted_label,) = placements["strategy_host"]
    assert hosted[0] == hosted_label[0] == "CPU:0", placements["strategy_host"]
    assert fetched[1] == hosted[1] == "uint8"  # what crosses to the device: 1 byte a channel


def test_distribute_fetches_each_replicas_share_to_its_device(placements):
    """The input options ``distribute`` passes a strategy: every replica's batch is
    prefetched onto that replica's device, whole batches cut in even shares."""
    (image,), (label,) = placements["strategy"]
    assert image[2] == [2, 32, 48, 3] and label[2] == [2, 32, 48]
    images, labels = placements["replicas"]
    assert images == [["CPU:0", "uint8", [1, 32, 48, 3]], ["CPU:1", "uint8", [1, 32, 48, 3]]]
    assert labels == [["CPU:0", "int32", [1, 32, 48]], ["CPU:1", "int32", [1, 32, 48]]]
    # Fetched to the host instead, the second replica's share would wait on the first device.
    images, labels = placements["replicas_host"]
    assert [d for d, _, _ in images + labels] == ["CPU:0"] * 4


@pytest.mark.slow  # a dispatcher and a worker in-process: 26 s in CI
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


def _within(seconds, fn, *args):
    """fn(*args), which must return or raise within ``seconds`` (a generous bound: the
    failure it catches is a wait without end, not a slow machine)."""
    outcome = {}

    def run():
        try:
            outcome["value"] = fn(*args)
        except BaseException as error:  # re-raised in the test's thread
            outcome["error"] = error

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        pytest.fail(f"{fn.__name__} still waits after {seconds} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def test_an_unreachable_data_service_is_one_line_naming_it(synthetic_root):
    """With no dispatcher at the address, tf.data would wait for ever in silence."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    address = f"grpc://127.0.0.1:{closed.getsockname()[1]}"
    closed.close()  # nothing listens there now
    with pytest.raises(InputError, match=f"^--data_service: no tf.data service dispatcher "
                                         f"answers at {address} within 2 s"):
        _within(120, build_dataset, _config(synthetic_root, data_service=address,
                                             data_service_timeout=2.0), True)
