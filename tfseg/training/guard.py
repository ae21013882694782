"""The training step's guard: an update that is not finite leaves every weight, slot and
counter as it was, written through selects where the optimizer allows it (no predicate
goes to the host), else skipped in a cond (``tfseg.training.step``)."""

import contextlib

import keras
import tensorflow as tf


def selects(optimizer, variables):
    """Whether ``make_train_step`` can skip ``optimizer``'s non-finite updates by select
    (no host round trip): plain Keras SGD (any momentum, Nesterov or not) whose every
    write goes through its ``assign`` / ``assign_add`` / ``assign_sub`` and the
    iteration counter: no decoupled weight decay, EMA, gradient accumulation,
    constraints or overwrite-with-gradient variables (each writes a variable directly).
    """
    return (type(optimizer) is keras.optimizers.SGD and optimizer.weight_decay is None
            and not optimizer.use_ema and not optimizer.gradient_accumulation_steps
            and all(getattr(v, "constraint", None) is None
                    and not getattr(v, "overwrite_with_gradient", False) for v in variables))


@contextlib.contextmanager
def kept_unless(optimizer, finite):
    """While entered, ``optimizer``'s writes keep each variable's value unless ``finite``.

    Keras optimizers write through these three methods ("to support backend specific
    optimizations"). Unless ``finite``, an assign writes the old value back, an add adds
    -0.0 and a subtraction subtracts +0.0: both leave every float as it was (-0.0 and
    NaN included), where a +0.0 added would turn -0.0 into +0.0. A finite step runs
    Keras' own ops on the same values, so its weights are bit-identical. Set on the
    instance around ``strategy.run`` (a tf.function trace), restored after.
    """
    def tf_variable(variable):
        return variable.value if isinstance(variable, keras.Variable) else variable

    def assign(variable, value):
        variable = tf_variable(variable)
        variable.assign(tf.where(finite, tf.cast(value, variable.dtype), variable.value()))

    def assign_add(variable, value):
        variable = tf_variable(variable)
        value = tf.cast(value, variable.dtype)
        variable.assign_add(tf.where(finite, value, tf.constant(-0.0, variable.dtype)))

    def assign_sub(variable, value):
        variable = tf_variable(variable)
        value = tf.cast(value, variable.dtype)
        variable.assign_sub(tf.where(finite, value, tf.constant(0.0, variable.dtype)))

    hooks = {"assign": assign, "assign_add": assign_add, "assign_sub": assign_sub}
    before = {name: optimizer.__dict__.get(name) for name in hooks}
    optimizer.__dict__.update(hooks)
    try:
        yield
    finally:
        for name, previous in before.items():  # back to what it was: the class's methods
            if previous is None:
                del optimizer.__dict__[name]
            else:
                optimizer.__dict__[name] = previous
