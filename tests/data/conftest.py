import os

import pytest

from tfseg.data import write_synthetic_cityscapes


@pytest.fixture(scope="session")
def synthetic_root(tmp_path_factory):
    """A small synthetic Cityscapes-layout set shared by the pipeline tests."""
    root = str(tmp_path_factory.mktemp("synthetic"))
    return write_synthetic_cityscapes(root, num_train=6, num_val=3, height=48, width=80, seed=3)


def run_eager_and_in_map(fn, *args):
    """(fn(*args) eagerly, fn(*args) inside Dataset.map) as numpy structures."""
    import tensorflow as tf

    eager = tf.nest.map_structure(lambda t: t.numpy(), fn(*args))
    mapped = tf.data.Dataset.from_tensors(args).map(fn).get_single_element()
    return eager, tf.nest.map_structure(lambda t: t.numpy(), mapped)


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
