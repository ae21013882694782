"""A run trained long enough that its class maps vary across the image (a 6-step run
predicts one class everywhere, where a shifted prediction looks the same as an exact one),
and the tiny data set it trains on; the 6-step run (``trained``), shared by this folder's
tests."""

import pytest

from tests.train.conftest import (TINY_FLAGS, data_dir, run_main, trained,  # noqa: F401
                                   trained_copy, trained_run)  # (fixtures)


@pytest.fixture(scope="session")
def varied_run(tmp_path_factory, data_dir):  # noqa: F811 (the fixture imported above)
    """(data_dir, model_dir) of the tiny model trained 150 steps (~40 s on 2 idle cores):
    six classes or so on the validation images."""
    model_dir = str(tmp_path_factory.mktemp("varied"))
    run_main("--mode=train", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
             "--train_steps=150", "--checkpoint_every=150", "--log_every=50", *TINY_FLAGS,
             "--learning_rate=0.05")
    return data_dir, model_dir
