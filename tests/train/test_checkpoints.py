"""Checkpoints: a checkpoint of another architecture is refused, naming it (real
checkpoints, in-process). Multi-worker resume is tests/train/test_distributed.py's."""

import re

import pytest
import tensorflow as tf

from tfseg.errors import InputError
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
    with pytest.raises(InputError, match=message) as error:
        checkpoints.Checkpoints(_model(**other), "/nonexistent").restore(path)
    assert len(str(error.value).splitlines()) == 1
    assert re.search(expected, str(error.value)), str(error.value)


def test_weights_the_model_lacks_are_refused(tmp_path):
    path = checkpoints.Checkpoints(_model(middle_repeats=2), str(tmp_path)).save(1)
    with pytest.raises(InputError, match=r"weights not in the model \(e\.g\. middle_unit2_"):
        checkpoints.Checkpoints(_model(), "/nonexistent").restore(path)
