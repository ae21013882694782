"""The activations a conv twin can take in: elementwise, deterministic, weightless.

A twin that takes in the activation before it keeps the activation's input (a
norm's output, which an output-only norm keeps anyway) and runs the activation
again in its backward pass. That is exact only for a function of each element
alone, with no state: ReLU and its variants, the sigmoid family, GELU. Softmax
(not elementwise), PReLU (weights) and Dropout (random) are not.

An activation is stored in a twin's config as `input_activation`: "relu", or the
name of another `keras.activations` function (an `Activation` layer's), "gelu_tanh"
(GELU's tanh approximation), or the serialized layer (`ReLU` with options, `LeakyReLU`, `ELU`).
"""

import keras

# Elementwise `keras.activations` functions, by the name `Activation` layers use.
_FUNCTIONS = ("relu", "relu6", "silu", "swish", "hard_silu", "hard_swish", "gelu",
              "leaky_relu", "elu", "selu", "sigmoid", "hard_sigmoid", "tanh", "softplus",
              "softsign", "mish", "celu", "exponential")


def gelu_tanh(x):
    """GELU's tanh approximation: `keras.ops.nn.gelu`'s default, which blocks that call
    it in their `call` use (keras-hub's MixFFN); `keras.activations.gelu` is exact."""
    return keras.activations.gelu(x, approximate=True)


# Names an `input_activation` may take beyond `keras.activations`'.
_EXTRA = {"gelu_tanh": gelu_tanh}
ELEMENTWISE_FUNCTIONS = {getattr(keras.activations, n) for n in _FUNCTIONS
                         if hasattr(keras.activations, n)} | set(_EXTRA.values())
# Activation layers with options and no weights (exact classes: a subclass may differ).
ELEMENTWISE_LAYERS = (keras.layers.ReLU, keras.layers.LeakyReLU, keras.layers.ELU)


def is_plain_relu(layer):
    """max(x, 0): a `ReLU` layer without options or `Activation("relu")`. ReLU6 and
    leaky ReLU are not: their masks differ."""
    if type(layer) is keras.layers.ReLU:
        cfg = layer.get_config()
        return cfg["max_value"] is None and not cfg["negative_slope"] and not cfg["threshold"]
    return type(layer) is keras.layers.Activation and layer.activation is keras.activations.relu


def is_elementwise(layer):
    """Whether `layer` is an activation a twin can run again (module docstring)."""
    if type(layer) in ELEMENTWISE_LAYERS:
        return True
    return type(layer) is keras.layers.Activation and layer.activation in ELEMENTWISE_FUNCTIONS


def serialize(layer):
    """The `input_activation` config value of an `is_elementwise` layer."""
    if is_plain_relu(layer):
        return "relu"
    if type(layer) is keras.layers.Activation:
        return keras.activations.serialize(layer.activation)
    return keras.layers.serialize(layer)


def deserialize(value):
    """The function an `input_activation` config value names: tensor -> tensor."""
    if isinstance(value, str):
        function = _EXTRA.get(value) or keras.activations.get(value)
        if function not in ELEMENTWISE_FUNCTIONS:
            raise ValueError(f"input_activation {value!r} is not an elementwise activation")
        return function
    layer = keras.layers.deserialize(value)
    if type(layer) not in ELEMENTWISE_LAYERS:
        raise ValueError(f"input_activation: {type(layer).__name__} is not an elementwise "
                         f"activation layer")
    return layer.call  # the maths alone: no name scope, no autocast (the input is cast)


class TakesActivation:
    """Mixin of every twin that takes in the activation before it (the conv, pooling
    and dense twins): the `input_activation` argument, kept in the config, and
    `_input_fn`, what `tfseg.layers.keep_input.lean_conv` runs again: "relu" (TF's
    ReluGrad, a mask from the input), another elementwise function, or None.

    `input_activation` is a property, so that a stock layer made this twin in place
    (`tfseg.memory.inside`) needs to set only it; the function is made there, once,
    not in `call`. The default is a conv's; the dense twins default to "gelu".
    """

    def __init__(self, *args, input_activation="relu", **kwargs):
        super().__init__(*args, **kwargs)
        self.input_activation = input_activation

    @property
    def input_activation(self):
        return self._input_activation

    @input_activation.setter
    def input_activation(self, value):
        fn = None if value is None else deserialize(value)
        self._input_activation = value
        self._input_fn = "relu" if fn is keras.activations.relu else fn

    def get_config(self):
        return {**super().get_config(), "input_activation": self.input_activation}
