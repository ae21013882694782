import keras
import numpy as np
import pytest

from tfseg.models import LayerPolicy
from tfseg.models.aspp import ATROUS_RATES, aspp


@pytest.mark.parametrize("norm", ["batch", "group"])
@pytest.mark.parametrize("output_stride", [8, 16, 32])
def test_aspp_branches_and_shape(output_stride, norm):
    inputs = keras.Input((7, 9, 24))
    outputs = aspp(inputs, LayerPolicy(norm=norm), ATROUS_RATES[output_stride], filters=16)
    model = keras.Model(inputs, outputs)
    concat = model.get_layer("aspp_concat")
    # image pooling + 1x1 + one branch per rate
    assert len(concat.input) == 2 + len(ATROUS_RATES[output_stride])
    out = model(np.random.rand(2, 7, 9, 24).astype("float32"), training=True)
    assert out.shape == (2, 7, 9, 16)


def test_image_pooling_branch_is_spatially_constant():
    x = keras.Input((7, 9, 8))
    out = aspp(x, LayerPolicy(norm="group", groups=4), (2,), filters=8, name="p")
    branch = keras.Model(x, out).get_layer("p_pool_resize").output
    values = keras.Model(x, branch)(np.random.rand(1, 7, 9, 8).astype("float32")).numpy()
    np.testing.assert_allclose(values, np.broadcast_to(values[:, :1, :1], values.shape), atol=1e-6)
    assert values.std() > 0
