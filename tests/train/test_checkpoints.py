"""Checkpoints: a checkpoint of another architecture is refused; every worker resumes
from the chief's checkpoints in model_dir (real checkpoints, in-process)."""

import os
import re
import types

import pytest
import tensorflow as tf

from tfseg.models import deeplab_v3_plus
from tfseg.train import checkpoints


def _model(middle_repeats=1, width=0.25, classes=3):
    return deeplab_v3_plus(classes, width_multiplier=width, middle_repeats=middle_repeats,
                           dropout=0.0)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(path, model) of a checkpoint of a 1-middle-unit, width-0.25, 3-class model."""
    model = _model()
    directory = str(tmp_path_factory.mktemp("ckpt"))
    return checkpoints.Checkpoints(model, directory).save(7), model


def test_the_same_architecture_restores_exactly(saved):
    path, model = saved
    twin = _model()
    assert checkpoints.Checkpoints(twin, "/nonexistent").restore(path) == path
    for a, b in zip(model.weights, twin.weights):
        assert a.path == b.path and bool(tf.reduce_all(a == b)), a.path


@pytest.mark.parametrize("other,expected", [
    (dict(middle_repeats=2), r"model weights missing \(e\.g\. middle_unit2_"),
    (dict(width=0.5), r"of another shape, checkpoint vs model \(e\.g\. entry_conv1/kernel"),
    (dict(classes=5), r"of another shape.*logits/"),
])
def test_another_architecture_is_refused_naming_the_checkpoint(saved, other, expected):
    path, _ = saved
    message = f"^tfseg: checkpoint {re.escape(path)} does not match"
    with pytest.raises(ValueError, match=message) as error:
        checkpoints.Checkpoints(_model(**other), "/nonexistent").restore(path)
    assert len(str(error.value).splitlines()) == 1
    assert re.search(expected, str(error.value)), str(error.value)


def test_weights_the_model_lacks_are_refused(tmp_path):
    path = checkpoints.Checkpoints(_model(middle_repeats=2), str(tmp_path)).save(1)
    with pytest.raises(ValueError, match=r"weights not in the model \(e\.g\. middle_unit2_"):
        checkpoints.Checkpoints(_model(), "/nonexistent").restore(path)


def _worker(task_id):
    """A strategy's cluster view as MultiWorkerMirroredStrategy has it: task ``task_id``
    of two workers (worker 0 is the chief)."""
    spec = tf.train.ClusterSpec({"worker": ["localhost:1", "localhost:2"]})
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        spec, task_type="worker", task_id=task_id)
    return types.SimpleNamespace(cluster_resolver=resolver)


def test_every_worker_restores_the_chiefs_latest_checkpoint(saved, tmp_path):
    path, model = saved
    model_dir = str(tmp_path)
    chief = checkpoints.Checkpoints(_model(), model_dir, _worker(0))
    chief.restore(path)
    assert chief.chief and chief.save(8) == os.path.join(model_dir, "ckpt-8")
    other = checkpoints.Checkpoints(_model(), model_dir, _worker(1))
    assert not other.chief and other.directory != model_dir
    # The other worker's own saves go to scratch and are deleted ...
    assert other.save(8).startswith(other.directory) and not os.path.exists(other.directory)
    # ... so it resumes from the chief's files, like the chief.
    assert other.latest == chief.latest == os.path.join(model_dir, "ckpt-8")
    twin = _model()
    assert checkpoints.Checkpoints(twin, model_dir, _worker(1)).restore() == chief.latest
    for a, b in zip(model.weights, twin.weights):
        assert bool(tf.reduce_all(a == b)), a.path
