"""How far a model's float32 gradients are from float64's: the yardstick of the family
table (`rewrite.py`), since deep batch-norm stacks are noisy in float32 by themselves
(about 1e-2 on ResNet50), so a rewritten model's error means something only beside
stock's own.

`gradient_error(model, build, images, labels, loss_fn)`: the model built again by
`build()` under float64, given `model`'s weights by path, and both differentiated on the
same batch; the error is max |g32 - g64| over every trainable variable, divided by the
largest |g64|. A rewritten model has stock's paths, so its error is measured against
stock's float64 maths: the maths it claims to compute.
"""


def gradients(model, images, labels, loss_fn):
    """{variable path: gradient as float64 numpy} of `loss_fn(labels, model(images))` in
    training mode."""
    import numpy as np
    import tensorflow as tf

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        return tape.gradient(loss, model.trainable_variables)

    grads = step(images, labels)
    return {v.path: np.asarray(tf.convert_to_tensor(g), "float64")
            for v, g in zip(model.trainable_variables, grads) if g is not None}


def gradient_error(model, build, images, labels, loss_fn):
    """max |g(model) - g64| / max |g64|, g64 from `build()` under float64 with `model`'s
    weights (by path) and no dropout; None where the two hold different trainable paths."""
    import keras
    import tensorflow as tf

    policy, floatx = keras.mixed_precision.global_policy(), keras.config.floatx()
    # Keras numbers unnamed layers from a global count (Xception's residual norms): from
    # zero again, the reference's paths are the first build's.
    keras.backend.clear_session()
    keras.config.set_floatx("float64")
    keras.mixed_precision.set_global_policy("float64")  # set once read: floatx alone is not
    try:
        reference = build()
    finally:
        keras.config.set_floatx(floatx)
        keras.mixed_precision.set_global_policy(policy)
    for layer in reference._flatten_layers():
        if isinstance(layer, keras.layers.Dropout):
            layer.rate = 0.0
    variables = {v.path: v for v in reference.weights}
    if not {w.path for w in model.trainable_weights} <= variables.keys():
        return None
    for weight in model.weights:
        if weight.path in variables:
            variables[weight.path].assign(tf.cast(weight, "float64"))
    expected = gradients(reference, tf.cast(images, "float64"), labels, loss_fn)
    got = gradients(model, images, labels, loss_fn)
    if got.keys() != expected.keys():
        return None
    scale = max(float(abs(g).max()) for g in expected.values()) or 1.0
    return max(float(abs(got[p] - g).max()) for p, g in expected.items()) / scale
