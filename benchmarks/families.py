"""keras-hub model families as code: each builder `name(keras_hub, size, tiny=False)` returns
the model a user trains (a task model where keras-hub has one, else the backbone), built from
its classes' constructors with random weights (no preset is downloaded) for (size, size, 3)
images. Configs follow keras-hub 0.32's checkpoint converters (keras_hub/src/utils/timm/ and
utils/transformers/convert_*.py) and, for SAM's image encoder, the paper's ViT-B. `tiny=True`
builds the same family at 1-2 blocks per stage and widths 8-32 (where the constructors allow),
every kind of block kept, for tests at 64x64.

    builder, size, batch = FAMILIES["hub:SwinTiny"]
    model = builder(keras_hub, size)                  # or builder(keras_hub, 64, tiny=True)
"""


def mobilenet_v3_small(keras_hub, size, tiny=False):
    """MobileNetV3-Small 1.0 (timm mobilenetv3_small_100 in convert_mobilenet.py), with the
    1024-wide hard-swish head conv and 1000 classes of MobileNetImageClassifier."""
    if tiny:  # a stride-2 ReLU block, a stride-2 SE block and a residual SE block
        blocks, expansion, filters = [1, 2], [[16], [32, 32]], [[8], [16, 16]]
        kernels, strides, pads = [[3], [5, 5]], [[2], [2, 1]], [[1], [2, 2]]
        se, act = [[None], [0.25] * 2], [["relu"], ["hard_swish"] * 2]
        stem, depthwise, last, features, classes = 8, 8, 32, 32, 10
    else:
        blocks = [2, 3, 2, 3]
        expansion = [[72, 88], [96, 240, 240], [120, 144], [288, 576, 576]]
        filters = [[24, 24], [40, 40, 40], [48, 48], [96, 96, 96]]
        kernels, pads = [[3, 3], [5, 5, 5], [5, 5], [5, 5, 5]], [[1, 1], [2] * 3, [2] * 2, [2] * 3]
        strides = [[2, 1], [2, 1, 1], [1, 1], [2, 1, 1]]
        se = [[None, None], [0.25] * 3, [0.25] * 2, [0.25] * 3]
        act = [["relu"] * 2, ["hard_swish"] * 3, ["hard_swish"] * 2, ["hard_swish"] * 3]
        stem, depthwise, last, features, classes = 16, 16, 576, 1024, 1000
    backbone = keras_hub.models.MobileNetBackbone(
        stackwise_expansion=expansion, stackwise_num_blocks=blocks, stackwise_num_filters=filters,
        stackwise_kernel_size=kernels, stackwise_num_strides=strides, stackwise_se_ratio=se,
        stackwise_activation=act, stackwise_padding=pads, output_num_filters=features,
        depthwise_filters=depthwise, depthwise_stride=2, depthwise_residual=False,
        last_layer_filter=last, squeeze_and_excite=0.5, input_num_filters=stem,
        input_activation="hard_swish", output_activation="hard_swish",
        image_shape=(size, size, 3))
    return keras_hub.models.MobileNetImageClassifier(backbone, classes, num_features=features)


def hgnetv2_b0(keras_hub, size, tiny=False):
    """HGNetV2-B0 (HGNETV2_CONFIGS["hgnetv2_b0"] in convert_hgnetv2.py) with learnable affine
    blocks (PP-HGNetV2-B0's use_lab), a 2048-wide head conv (timm's) and 1000 classes."""
    if tiny:  # 2-layer blocks; the third stage has two blocks (the second is residual)
        stem, head, classes = [3, 8, 8], 32, 10
        stages = [[8, 8, 16, 1, 2, 3], [16, 8, 16, 1, 2, 3], [16, 16, 32, 2, 2, 5],
                  [32, 16, 32, 1, 2, 5]]
    else:
        stem, head, classes = [3, 16, 16], 2048, 1000
        stages = [[16, 16, 64, 1, 3, 3], [64, 32, 256, 1, 3, 3], [256, 64, 512, 2, 3, 5],
                  [512, 128, 1024, 1, 3, 5]]
    backbone = keras_hub.models.HGNetV2Backbone(
        depths=[stage[3] for stage in stages], embedding_size=stem[-1],
        hidden_sizes=[stage[2] for stage in stages], stem_channels=stem, hidden_act="relu",
        use_learnable_affine_block=True, stackwise_stage_filters=stages,
        apply_downsample=[False, True, True, True],
        use_lightweight_conv_block=[False, False, True, True], image_shape=(size, size, 3))
    return keras_hub.models.HGNetV2ImageClassifier(backbone, None, classes, head_filters=head)


def dinov2_small(keras_hub, size, tiny=False):
    """DINOv2 ViT-S/14 (facebook/dinov2-small via convert_dinov2.py: 12 layers, width 384,
    6 heads, MLP 1536, position embeddings trained at 518 and interpolated), outputting its
    normed tokens (batch, 1 + patches, 384), keras-hub having no DINOv2 head. Its stride-14
    patch conv takes any size as floor(size / 14) ** 2 patches (9x9 at 128, the last 2 pixel
    rows and columns unseen); its input is {"images": ...}, a plain tensor works (Keras warns)."""
    layers, width, heads, mlp = (2, 32, 2, 64) if tiny else (12, 384, 6, 1536)
    return keras_hub.models.DINOV2Backbone(
        patch_size=14, num_layers=layers, hidden_dim=width, num_heads=heads,
        intermediate_dim=mlp, layer_scale_init_value=1.0, num_register_tokens=0,
        use_mask_token=True, use_swiglu_ffn=False, dropout_rate=0.0, drop_path_rate=0.0,
        image_shape=(size, size, 3), position_embedding_shape=(126, 126) if tiny else (518, 518),
        antialias_in_interpolation=False, apply_layernorm=False)


def deit_tiny(keras_hub, size, tiny=False):
    """DeiT-Ti/16 (facebook/deit-tiny-distilled-patch16-224 via convert_deit.py: 12 layers,
    width 192, 3 heads, MLP 768, class and distillation tokens), with the class-token head of
    DeiTImageClassifier, 1000 classes; `size` must be a multiple of 16."""
    layers, width, heads, mlp = (2, 32, 2, 64) if tiny else (12, 192, 3, 768)
    backbone = keras_hub.models.DeiTBackbone(
        image_shape=(size, size, 3), patch_size=16, num_layers=layers, num_heads=heads,
        hidden_dim=width, intermediate_dim=mlp, dropout_rate=0.0, attention_dropout=0.0,
        layer_norm_epsilon=1e-12)
    return keras_hub.models.DeiTImageClassifier(backbone, 10 if tiny else 1000)


def swin_tiny(keras_hub, size, tiny=False):
    """Swin-T (microsoft/swin-tiny-patch4-window7-224 via convert_swin_transformer.py: width
    96, depths 2-2-6-2, heads 3-6-12-24), 1000 classes, drop path 0 (0.1 in its recipe: a
    random depth would leave the float64 gradient comparison nothing to compare). The window is the
    largest size up to Swin's 7 that divides the last stage's map, size / 32: 4 at 128 (maps
    32, 16, 8, 4, no padding; the last stage's one window is unshifted), 7 at 224."""
    last = max(size // 32, 1)
    window = max(w for w in range(1, 8) if last % w == 0)
    width, depths, heads = (8, (2, 2, 2, 2), (1, 1, 2, 2)) if tiny else (96, (2, 2, 6, 2),
                                                                         (3, 6, 12, 24))
    backbone = keras_hub.models.SwinTransformerBackbone(
        image_shape=(size, size, 3), embed_dim=width, depths=depths, num_heads=heads,
        window_size=window, patch_size=4, mlp_ratio=4.0, qkv_bias=True, dropout_rate=0.0,
        attention_dropout=0.0, drop_path=0.0, patch_norm=True)
    return keras_hub.models.SwinTransformerImageClassifier(backbone, 10 if tiny else 1000)


def sam_vitdet(keras_hub, size, tiny=False):
    """SAM's ViT-B image encoder (ViTDetBackbone: patch 16, 12 layers, width 768, 12 heads, MLP
    3072, global attention in layers 2, 5, 8, 11, relative and absolute positions, 256-channel
    neck), outputting the (batch, size / 16, size / 16, 256) feature map. SAM's 14-token windows
    suit its 64-token grid at 1024; here the window is min(14, grid / 2), 4 on the 8x8 grid at
    128 (four windows, no padding)."""
    layers, width, heads, mlp, out = (2, 32, 2, 64, 16) if tiny else (12, 768, 12, 3072, 256)
    return keras_hub.models.ViTDetBackbone(
        hidden_size=width, num_layers=layers, intermediate_dim=mlp, num_heads=heads,
        global_attention_layer_indices=[1] if tiny else [2, 5, 8, 11],
        image_shape=(size, size, 3), patch_size=16, num_output_channels=out, use_bias=True,
        use_abs_pos=True, use_rel_pos=True, window_size=max(min(14, size // 32), 1),
        layer_norm_epsilon=1e-6)


def efficientnet_b0(keras_hub, size, tiny=False):
    """EfficientNet-B0 (timm efficientnet_b0: convert_efficientnet.py's base config and "b0"
    variant), with the 1280-wide top conv, 0.2 classifier dropout and 1000 classes."""
    if tiny:  # an unexpanded block, a stride-2 expanded block and a residual one, all SE
        kernels, repeats, expansion, strides = [3, 3, 5], [1, 2, 1], [1, 6, 6], [1, 2, 2]
        inputs, outputs, features, classes = [8, 8, 16], [8, 16, 24], 32, 10
    else:
        kernels, repeats = [3, 3, 5, 3, 5, 5, 3], [1, 2, 2, 3, 3, 4, 1]
        expansion, strides = [1, 6, 6, 6, 6, 6, 6], [1, 2, 2, 2, 1, 2, 1]
        inputs, outputs = [32, 16, 24, 40, 80, 112, 192], [16, 24, 40, 80, 112, 192, 320]
        features, classes = 1280, 1000
    stacks = len(kernels)
    backbone = keras_hub.models.EfficientNetBackbone(
        stackwise_width_coefficients=[1.0] * stacks, stackwise_depth_coefficients=[1.0] * stacks,
        stackwise_kernel_sizes=kernels, stackwise_num_repeats=repeats,
        stackwise_input_filters=inputs, stackwise_output_filters=outputs,
        stackwise_expansion_ratios=expansion, stackwise_strides=strides,
        stackwise_squeeze_and_excite_ratios=[0.25] * stacks, stackwise_block_types=["v1"] * stacks,
        stackwise_force_input_filters=[0] * stacks, stackwise_nores_option=[False] * stacks,
        dropout=0.0, min_depth=None, include_stem_padding=True,
        use_depth_divisor_as_min_depth=True, cap_round_filter_decrease=True,
        stem_conv_padding="valid", batch_norm_momentum=0.9, batch_norm_epsilon=1e-5,
        num_features=features, input_shape=(size, size, 3))
    return keras_hub.models.EfficientNetImageClassifier(backbone, classes, dropout=0.2)


def cspdarknet53(keras_hub, size, tiny=False):
    """CSPDarkNet-53 (timm cspdarknet53 in convert_cspnet.py): CSP stages of dark blocks,
    leaky ReLU, 1000 classes (CSPNetImageClassifier)."""
    depth, filters = ([1, 2], [16, 32]) if tiny else ([1, 2, 8, 8, 4], [64, 128, 256, 512, 1024])
    backbone = keras_hub.models.CSPNetBackbone(
        stem_filters=8 if tiny else 32, stem_kernel_size=3, stem_strides=1,
        stackwise_depth=depth, stackwise_num_filters=filters, stackwise_strides=[2] * len(depth),
        bottle_ratio=(0.5, 1.0), block_ratio=(1.0, 0.5), expand_ratio=(2.0, 1.0),
        stage_type="csp", block_type="dark_block", down_growth=True, stem_pooling=None,
        stem_padding="same", avg_down=False, cross_linear=False, groups=1,
        image_shape=(size, size, 3))
    return keras_hub.models.CSPNetImageClassifier(backbone, 10 if tiny else 1000)


def densenet121(keras_hub, size, tiny=False):
    """DenseNet-121 (timm densenet121 in convert_densenet.py): dense blocks of 6, 12, 24 and
    16 layers, growth rate 32, compression 0.5, 1000 classes (DenseNetImageClassifier)."""
    backbone = keras_hub.models.DenseNetBackbone(
        stackwise_num_repeats=[1, 2, 1, 1] if tiny else [6, 12, 24, 16],
        compression_ratio=0.5, growth_rate=8 if tiny else 32, image_shape=(size, size, 3))
    return keras_hub.models.DenseNetImageClassifier(backbone, 10 if tiny else 1000)


def _resnet(keras_hub, stem, filters, blocks, block_type, pre_activation, image_shape):
    """keras-hub's ResNetBackbone with timm's resnet stem (one 7x7 conv, a max pool)."""
    return keras_hub.models.ResNetBackbone(
        input_conv_filters=[stem], input_conv_kernel_sizes=[7],
        stackwise_num_filters=filters, stackwise_num_blocks=blocks,
        stackwise_num_strides=[1, 2, 2, 2], block_type=block_type,
        use_pre_activation=pre_activation, image_shape=image_shape)


def basnet_r34(keras_hub, size, tiny=False):
    """BASNet with a ResNet-34 encoder (timm resnet34 in convert_resnet.py), 64 projection
    filters and one class (basnet_duts); BASNetImageSegmenter outputs the refined map after
    BASNet's own sigmoid, probabilities, not logits."""
    # ResNetBackbone wants 64 filters in its first stage, and its first basic blocks take
    # BASNet's projection (64 wide, so its decoder is 512 wide) unprojected, tiny or not
    stem, filters, blocks = (64, [64, 8, 16, 16], [1, 2, 1, 1]) if tiny else (
        64, [64, 128, 256, 512], [3, 4, 6, 3])
    encoder = _resnet(keras_hub, stem, filters, blocks, "basic_block", False, (None, None, 3))
    backbone = keras_hub.models.BASNetBackbone(
        encoder, num_classes=1, image_shape=(size, size, 3), projection_filters=stem)
    return keras_hub.models.BASNetImageSegmenter(backbone)


def resnet50_v2(keras_hub, size, tiny=False):
    """ResNet-50 V2, pre-activation bottlenecks of 3, 4, 6, 3 blocks (timm resnetv2_50 in
    convert_resnet.py), 1000 classes (ResNetImageClassifier)."""
    # ResNetBackbone wants 64 filters in its first stage, tiny or not
    stem, filters, blocks = (8, [64, 8, 16, 16], [1, 2, 1, 1]) if tiny else (
        64, [64, 128, 256, 512], [3, 4, 6, 3])
    backbone = _resnet(keras_hub, stem, filters, blocks, "bottleneck_block", True,
                       (size, size, 3))
    return keras_hub.models.ResNetImageClassifier(backbone, 10 if tiny else 1000)


# Every family: builder, default size, default batch.
FAMILIES = {
    "hub:MobileNetV3Small": (mobilenet_v3_small, 128, 2),
    "hub:HGNetV2B0": (hgnetv2_b0, 128, 2),
    "hub:DINOv2Small": (dinov2_small, 128, 2),
    "hub:DeiTTiny": (deit_tiny, 128, 2),
    "hub:SwinTiny": (swin_tiny, 128, 2),
    "hub:SAMViTDet": (sam_vitdet, 128, 2),
    "hub:EfficientNetB0": (efficientnet_b0, 128, 2),
    "hub:CSPDarkNet53": (cspdarknet53, 128, 2),
    "hub:DenseNet121": (densenet121, 128, 2),
    "hub:BASNetResNet34": (basnet_r34, 128, 2),
    "hub:ResNet50V2": (resnet50_v2, 128, 2),
}
