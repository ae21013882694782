import pytest
import tensorflow as tf

from tfseg.models import deeplab_v3_plus
from tfseg.models.deeplab import part_of
from tfseg.memory.kept import layer_names, layer_of
from tests.conftest import TINY

# The full-size buffers of the twins' backward passes: norm gradients, rebuilt
# inputs, ReLU masks, dilated convs' space-to-batch copies, conv input gradients.
BACKWARD_KINDS = ("FusedBatchNormGradV3", "ReluGrad", "SpaceToBatchND", "BatchToSpaceND",
                  "DepthwiseConv2dNativeBackpropInput", "Conv2DBackpropInput")


@pytest.mark.parametrize("norm", ["batch", "group"])
def test_the_twins_backward_buffers_are_attributed_to_their_layers(norm):
    """The tape calls a custom gradient outside its layer's name scope: unless the
    twin opens one, the report files its backward buffers under "loss_and_other"
    (at 513x513 they were most of the memory-saving peak's unattributed 254 MiB)."""
    model = deeplab_v3_plus(4, norm=norm, memory_saving=True, dropout=0.0, **TINY)

    @tf.function
    def step(images):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(images, training=True) ** 2)
        return tape.gradient(loss, model.trainable_variables)

    graph = step.get_concrete_function(tf.TensorSpec((2, 65, 97, 3))).graph
    names = layer_names(model)
    backward = [op.name for op in graph.get_operations() if op.type in BACKWARD_KINDS]
    assert len(backward) > 50
    unattributed = [name for name in backward if not part_of(layer_of(name, names))]
    assert not unattributed
