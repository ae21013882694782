"""What a Keras user would reach for instead of tfseg's twins, on the same model and
step: `keras.RematScope` in each of its modes, and `tf.recompute_grad` on tfseg's
own recompute segments. The benchmark and the report measure them beside stock.

Each is a builder for `StepConfig(builder=("tfseg.profile.anchors", NAME))`, NAME
one of `tfseg.config.MEMORY_ANCHORS`: the stock DeepLabv3+ of the step's run, built
as that tool would build it, measured as it is (variant "stock"; `anchor_step`).
"""

import keras
import tensorflow as tf

from tfseg.config import MEMORY_ANCHORS
from tfseg.models import segment_of
from tfseg.models.xception import DEFAULT_RECOMPUTE, XCEPTION65, unit_names
from tfseg.runtime import builders


@keras.saving.register_keras_serializable(package="tfseg")
class RecomputeGrad(keras.layers.Layer):
    """Runs `block` (a single-input `keras.Model`) under `tf.recompute_grad`: TF's own
    gradient checkpointing, for comparison with `tfseg.layers.Recompute`. Unlike
    that layer it runs the block's batch-norm updates again in the backward pass.
    Shapes: those of `block`."""

    def __init__(self, block, **kwargs):
        super().__init__(**kwargs)
        self.block = block

    def build(self, input_shape):
        if not self.block.built:
            self.block.build(input_shape)
        self.built = True

    def call(self, inputs, training=None):
        if not training:
            return self.block(inputs, training=training)
        return tf.recompute_grad(lambda x: self.block(x, training=True))(inputs)

    def compute_output_shape(self, input_shape):
        return self.block.compute_output_shape(input_shape)


def _model(config, **changes):
    """The stock DeepLabv3+ of `config` (a `StepConfig`), with `changes` to its
    arguments."""
    return builders.model(config.run, config.num_classes,
                          **{"memory_saving": False, "recompute": (), **changes})


def _blocks(config):
    return tuple(config.recompute_blocks or DEFAULT_RECOMPUTE)


def _remat(mode, **options):
    def build(config):
        with keras.RematScope(mode=mode, **options):
            return _model(config)
    return build


keras_remat_full = _remat("full")
keras_remat_activations = _remat("activations")
keras_remat_larger_than = _remat("larger_than")  # Keras' default threshold: 1024 elements


def keras_remat_list_of_layers(config):
    """RematScope on the layers of tfseg's recompute segments (`recompute_blocks`)."""
    repeats, blocks = config.run.model.middle_repeats, _blocks(config)
    segments = set(blocks) | {unit for spec in XCEPTION65 if spec.name in blocks
                              for unit in unit_names(spec, repeats)}
    names = [layer.name for layer in _model(config).layers
             if segment_of(layer.name, repeats) in segments]
    with keras.RematScope(mode="list_of_layers", layer_names=names):
        return _model(config)


def tf_recompute_grad(config):
    """`tf.recompute_grad` on tfseg's recompute segments (`recompute_blocks`)."""
    return _model(config, recompute=_blocks(config), recompute_layer=RecomputeGrad)


def anchor_step(step, name):
    """`step` (a `StepConfig`) measuring anchor `name` (one of `MEMORY_ANCHORS`) on
    its recompute segments (`recompute_blocks`, default `DEFAULT_RECOMPUTE`)."""
    if name not in MEMORY_ANCHORS:
        raise ValueError(f"unknown anchor {name!r}; choose from {MEMORY_ANCHORS}")
    return step.replace(variant="stock", builder=(__name__, name))
