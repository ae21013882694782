"""RunConfig validation and what it carries into the data pipeline's DataConfig."""

import pytest

from tfseg import data as data_lib
from tfseg.errors import InputError
from tfseg.models import xception
from tfseg.train import builders
from tfseg.train.config import DATASETS, RECOMPUTE_BLOCKS, RunConfig


def test_names_match_the_data_and_model_packages():
    # config.py repeats them so that --mode=validate does not import TensorFlow.
    assert DATASETS == data_lib.DATASETS
    assert RECOMPUTE_BLOCKS == xception.RECOMPUTABLE


@pytest.mark.parametrize("field,value", [
    ("dropout", 2.0), ("dropout", -0.1), ("momentum", 5.0), ("momentum", 1.0),
    ("dataset", "foo"), ("scale_range", (2.0, 0.5)), ("scale_range", (0.0, 1.0)),
    ("data_service", "localhost:5000"), ("eval_every", -1), ("weight_decay", -1e-4),
    ("end_learning_rate", 1.0), ("lr_power", 0.0), ("num_summary_images", -1),
    ("report_verify_seconds", -1.0), ("weight_decay_type", "adamw"),
    ("max_skipped_updates", 0),
])
def test_bad_values_name_their_flag(field, value):
    with pytest.raises(InputError, match=f"^--{field}: "):
        RunConfig(**{field: value})


def test_data_flags_reach_the_training_data_config_only():
    config = RunConfig(data_service="grpc://localhost:5050", deterministic=True,
                       skip_bad_examples=True, data_dir="/data/x", scale_range=(0.75, 1.5))
    train = builders.data_config(config, training=True)
    assert train.data_service == "grpc://localhost:5050"
    assert train.deterministic and train.skip_bad_examples
    assert (train.root, train.scale_range, train.batch_size) == ("/data/x", (0.75, 1.5), 8)
    # Evaluation reads every image once, in order, in-process.
    evaluation = builders.data_config(config, training=False)
    assert evaluation.data_service is None and evaluation.split == "val"
    assert evaluation.skip_bad_examples and evaluation.batch_size == 1
    assert builders.data_config(RunConfig(), training=True).data_service is None
