"""What a ``Config`` carries into the data pipeline's ``DataConfig`` and the model."""

import keras

from tfseg.config import Config
from tfseg.layers import (InplaceBatchNormalization, InplaceGroupNormalization,
                          ReluDepthwiseConv2D)
from tfseg.layers.conv_kernels import TakesKernelForm
from tfseg.runtime import builders
from tests.layers.twins import training_ops


def test_data_flags_reach_the_training_data_config_only():
    config = Config.from_flat(data_service="grpc://localhost:5050", deterministic=True,
                              skip_bad_examples=True, data_dir="/data/x", scale_range=(0.75, 1.5))
    train = builders.data_config(config, training=True)
    assert train.data_service == "grpc://localhost:5050"
    assert train.deterministic and train.skip_bad_examples
    assert (train.root, train.scale_range, train.batch_size) == ("/data/x", (0.75, 1.5), 4)
    # Evaluation reads every image once, in order, in-process.
    evaluation = builders.data_config(config, training=False)
    assert evaluation.data_service is None and evaluation.split == "val"
    assert evaluation.skip_bad_examples and evaluation.batch_size == 1
    assert builders.data_config(Config(), training=True).data_service is None
    assert builders.data_config(Config.from_flat(seed=-1), training=True).seed is None


def test_the_model_section_is_the_model():
    # Each setting away from its default, and each read back from the model it builds.
    config = Config.from_flat(width_multiplier=0.125, middle_repeats=1, output_stride=32,
                              norm="group", memory_saving=True)
    model = builders.model(config, num_classes=3)
    assert model.output_shape[-1] == 3
    layers = list(model._flatten_layers())  # inside Recompute blocks and serial branches too
    by_name = {layer.name: layer for layer in layers}
    names = set(by_name)
    assert by_name["exit_block2_sepconv3_pointwise"].filters == 2048 // 8  # width_multiplier
    assert "middle_unit1_sepconv1_depthwise" in names  # middle_repeats
    assert "middle_unit2_sepconv1" not in str(names)
    # output_stride 32: no dilated conv anywhere, and no atrous ASPP branch.
    assert not [layer.name for layer in layers if getattr(layer, "dilation_rate", 1) not in (
        1, (1, 1))]
    assert not [name for name in names if name.startswith("aspp_sepconv")]
    norms = [layer for layer in layers if isinstance(
        layer, (keras.layers.BatchNormalization, keras.layers.GroupNormalization))]
    # norm "group", as memory_saving's output-only twins (but those only a stock ReLU
    # reads: ASPP's projection's, and at this width the stem's second, whose ReLU feeds
    # entry block 1's subsampled shortcut, tfseg.models.xception._conv_shortcut); and
    # its fused ReLU -> convs.
    stock_norms = ("aspp_projection_bn", "entry_conv2_bn")
    assert all(type(by_name[name]) is keras.layers.GroupNormalization for name in stock_norms)
    assert norms and all(type(layer) is InplaceGroupNormalization for layer in norms
                         if layer.name not in stock_norms)
    assert any(isinstance(layer, ReluDepthwiseConv2D) for layer in layers)
    assert builders.model(config, 3, norm="batch").count_params() != model.count_params()


def test_each_model_takes_its_own_kernel_forms_and_leaves_none_behind():
    """--fused_norm and --depthwise_kernel reach the twins of the model they build as each
    twin's own setting: a model built after it with the defaults gets "auto" twins, and
    the first's batch norms still trace unfused (tfseg.layers.fused_norm)."""
    tiny = dict(width_multiplier=0.125, middle_repeats=1, memory_saving=True)

    def built(**forms):
        layers = list(builders.model(Config.from_flat(**tiny, **forms), num_classes=3)
                      ._flatten_layers())
        norms = [l for l in layers if isinstance(l, InplaceBatchNormalization)]
        kernels = {l.kernel_form for l in layers if isinstance(l, TakesKernelForm)}
        return norms, {l.norm_form for l in norms}, kernels

    first, *forms = built(fused_norm="false", depthwise_kernel="native")
    assert forms == [{"false"}, {"native"}]
    second, *forms = built()
    assert forms == [{"auto"}, {"auto"}]
    fused = {"FusedBatchNormV3", "FusedBatchNormGradV3"}
    for norm, fused_ops in ((first[0], set()), (second[0], fused)):
        ops = {op.type for op in training_ops(norm, (2, 5, 5, norm.gamma.shape[0]))}
        assert ops & fused == fused_ops
