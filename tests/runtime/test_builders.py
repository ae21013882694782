"""What a ``Config`` carries into the data pipeline's ``DataConfig`` and the model."""

import keras

from tfseg.config import Config
from tfseg.layers import InplaceGroupNormalization, ReluDepthwiseConv2D, fused_norm
from tfseg.runtime import builders


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
    # norm "group", as memory_saving's output-only twins; and its fused ReLU -> convs.
    assert norms and all(type(layer) is InplaceGroupNormalization for layer in norms)
    assert any(isinstance(layer, ReluDepthwiseConv2D) for layer in layers)
    assert builders.model(config, 3, norm="batch").count_params() != model.count_params()


def test_fused_norm_reaches_the_batch_norm_twins():
    """--fused_norm sets the form the batch-norm twins trace in (tfseg.layers.fused_norm)."""
    try:
        for form in ("false", "true", "auto"):
            config = Config.from_flat(width_multiplier=0.125, middle_repeats=1,
                                      memory_saving=True, fused_norm=form)
            builders.model(config, num_classes=3)
            assert fused_norm.form() == form
    finally:
        fused_norm.use("auto")
