import pytest

from tfseg.models import deeplab_v3_plus


@pytest.fixture(scope="session")
def reference_deeplab():
    """research/deeplab's DeepLabv3+: Xception-65 at output stride 16, 21 classes, 41M
    parameters. Built once (seconds); tests only read its layers and variables."""
    return deeplab_v3_plus(21)
