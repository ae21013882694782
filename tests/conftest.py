import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# oneDNN's CPU kernels corrupted the heap on some tiny-width (8-channel) training
# steps here; tests (and the subprocesses they start) use TF's own kernels.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
# Tests that compile with XLA (in this process and in the ones they start): LLVM's
# optimisation of the generated code takes half the compile time, and no test here is
# about the compiled code's speed. It leaves XLA's buffer assignment alone, so the
# measured peaks are the same (tests/train/test_fit.py measured both).
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")

import keras  # noqa: E402
import pytest  # noqa: E402

# The suite's own rules: slow tests marked (where CI is set; named elsewhere), slow and
# grouped tests first.
from tests.rules import (pytest_addoption, pytest_collection_modifyitems,  # noqa: E402,F401
                         pytest_runtest_call, pytest_runtest_makereport,
                         pytest_terminal_summary)

# Tiny but complete networks: every block kind, odd sizes, fast on 2 CPU cores.
TINY = dict(width_multiplier=0.125, middle_repeats=2)


@pytest.fixture
def mixed_bfloat16():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.fixture
def float64():
    """Whole-network comparisons run in float64: in float32, BN's backward cancels
    large terms and any change of op order shows as ~1% noise in early layers."""
    keras.config.set_floatx("float64")
    yield
    keras.config.set_floatx("float32")


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    keras.utils.set_random_seed(0)
    yield
    # Without its gc.collect(), which takes 0.1-0.7 s a test in a worker's large heap;
    # Python's own collector frees the cycles soon enough.
    keras.backend.clear_session(free_memory=False)
