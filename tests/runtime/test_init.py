"""--init_checkpoint from another tfseg run: weights only, by path, logits of another class
count skipped (real checkpoints of small DeepLabv3+ models, written here)."""

import numpy as np
import pytest
import tensorflow as tf

from tfseg import memory
from tfseg.config import Config
from tfseg.errors import InputError
from tfseg.runtime import checkpoints, init

SMALL = dict(width_multiplier=0.25, middle_repeats=1, crop_size=(33, 33))


def _model(classes, **settings):
    from tfseg.runtime import builders

    return builders.model(Config.from_flat(**{**SMALL, **settings}), classes)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(folder, model): a 5-class run saved at step 7 with an optimizer."""
    from tfseg.training import optim

    model_dir = str(tmp_path_factory.mktemp("run"))
    model = _model(5)
    for w in model.weights:
        w.assign(w + 0.25)  # away from any initial value
    optimizer = optim.optimizer(Config.from_flat(**SMALL), model)
    step = tf.Variable(7, dtype=tf.int64)
    checkpoints.Checkpoints(model, model_dir, optimizer=optimizer, step=step).save(7)
    return model_dir, model


@pytest.mark.parametrize("classes, memory_saving", [(5, False), (7, True)])
def test_weights_load_by_path_and_other_logits_are_skipped(run, classes, memory_saving):
    model_dir, source = run
    target, lines = _model(classes, memory_saving=memory_saving), []
    init.load(target, model_dir, log=lines.append)  # the folder: its latest checkpoint
    before, after = memory.variables_by_path(source), memory.variables_by_path(target)
    for path, variable in after.items():
        if classes != 5 and path.startswith("logits/"):
            assert not np.allclose(variable.numpy()[..., :5], before[path].numpy()), path
        else:
            np.testing.assert_array_equal(variable.numpy(), before[path].numpy(), err_msg=path)
    skipped = 2 if classes != 5 else 0
    assert len(lines) == 1 and lines[0].startswith(
        f"initialised from tfseg checkpoint {model_dir}/ckpt-7: loaded {len(after) - skipped} "
        f"weights, skipped {skipped}")


def test_another_architecture_is_one_line_naming_the_weight(run):
    model_dir, _ = run
    with pytest.raises(InputError, match=r"^--init_checkpoint: .*ckpt-7 has no weight "
                                         r"middle_unit2_"):
        init.load(_model(5, middle_repeats=2), model_dir)


def test_adapt_takes_the_runs_architecture_unless_given(run, tmp_path):
    model_dir, _ = run
    from tfseg.runtime import files

    files.save_config(Config.from_flat(**SMALL, norm="group", head_epsilon=1e-5), model_dir)
    config = Config.from_flat(init_checkpoint=model_dir, middle_repeats=3)
    adapted = init.adapt(config, given={"middle_repeats"}, log=lambda line: None)
    assert adapted.run.init_checkpoint == f"{model_dir}/ckpt-7"
    assert (adapted.model.norm, adapted.model.head_epsilon) == ("group", 1e-5)
    assert adapted.model.width_multiplier == 0.25 and adapted.model.middle_repeats == 3
