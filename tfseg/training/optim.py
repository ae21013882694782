"""The optimizer of a training run: momentum SGD on a warm-up and polynomial-decay
schedule, with research/deeplab's weight decay (an L2 loss term or decoupled).

    optimizer = optim.optimizer(config, model)           # built, under the strategy's scope
    weight, kernels = optim.l2_weight_decay(config, model)   # the step's L2 term, if any
"""

import keras
import tensorflow as tf

from tfseg import keras_graph


class WarmupPolyDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 over ``warmup_steps``, then Keras' ``PolynomialDecay``.

    Keras 3's ``PolynomialDecay`` has no warm-up (only ``CosineDecay`` has), so
    this wraps it; the decay runs over the steps after the warm-up.
    """

    def __init__(self, learning_rate, train_steps, warmup_steps=0, end_learning_rate=0.0,
                 power=0.9):
        self.learning_rate = learning_rate
        self.train_steps = train_steps
        self.warmup_steps = warmup_steps
        self.end_learning_rate = end_learning_rate
        self.power = power
        self.poly = keras.optimizers.schedules.PolynomialDecay(
            learning_rate, max(train_steps - warmup_steps, 1), end_learning_rate, power=power)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warm = self.learning_rate * (step + 1.0) / max(self.warmup_steps, 1)
        decayed = self.poly(tf.maximum(step - self.warmup_steps, 0.0))
        return tf.where(step < self.warmup_steps, warm, decayed)

    def get_config(self):
        return dict(learning_rate=self.learning_rate, train_steps=self.train_steps,
                    warmup_steps=self.warmup_steps, end_learning_rate=self.end_learning_rate,
                    power=self.power)


def decayed_kernels(model):
    """The variables weight decay applies to: conv and dense kernels, as in research/deeplab.

    Depthwise kernels are left out (research/deeplab's ``regularize_depthwise=False``),
    and so are norm scales/offsets and biases (the 1-D variables).
    """
    depthwise = {id(layer.kernel) for layer in keras_graph.sublayers(model)
                 if isinstance(layer, keras.layers.DepthwiseConv2D)}
    return [v for v in model.trainable_variables
            if len(v.shape) > 1 and id(v) not in depthwise]


def optimizer(config, model):
    """Built SGD + momentum on the warm-up/poly schedule.

    With ``weight_decay_type="decoupled"`` the optimizer decays ``decayed_kernels``
    (``variable -= lr * wd * variable``, the same on any number of replicas);
    "l2" is a loss term instead (``step.l2_penalty``), and the optimizer has none.
    Under ``mixed_float16`` the optimizer is wrapped in a ``LossScaleOptimizer``,
    which also skips non-finite updates.
    """
    optim = config.optim
    schedule = WarmupPolyDecay(optim.learning_rate, optim.train_steps, optim.warmup_steps,
                               optim.end_learning_rate, optim.lr_power)
    decoupled = optim.weight_decay if optim.weight_decay_type == "decoupled" else 0.0
    sgd = keras.optimizers.SGD(schedule, momentum=optim.momentum, weight_decay=decoupled or None)
    if decoupled:
        decayed = {id(v) for v in decayed_kernels(model)}
        sgd.exclude_from_weight_decay(
            var_list=[v for v in model.trainable_variables if id(v) not in decayed])
    if config.run.dtype_policy == "mixed_float16":
        sgd = keras.optimizers.LossScaleOptimizer(sgd)
    # Built now (under the caller's strategy scope): a restore then fills the momentum
    # slots at once, and no variable is created inside the distributed step's tf.cond.
    sgd.build(model.trainable_variables)
    return sgd


def l2_weight_decay(config, model):
    """(weight, kernels) of the L2 loss term, or (0.0, []) when decay is decoupled or off."""
    if config.optim.weight_decay_type != "l2" or not config.optim.weight_decay:
        return 0.0, []
    return config.optim.weight_decay, decayed_kernels(model)
