"""The twins' depthwise convs as TensorFlow's kernels or as grouped Conv2Ds
(tfseg/layers/conv_kernels.py, `--depthwise_kernel`)."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfseg.config import Config
from tfseg.errors import InputError
from tfseg.layers import Recompute, ReluDepthwiseConv2D, conv_kernels
from tfseg.runtime import builders
from tests.layers.twins import training_ops

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("rate", [1, 2])
def test_the_native_form_is_tfs_depthwise_conv(rate):
    """float64, stride 1 "same": forward and both gradients equal autodiff of
    `tf.nn.depthwise_conv2d` (dilated: its space-to-batch form, which the twin then
    differentiates; the grouped form's maths: below)."""
    x = tf.constant(np.random.RandomState(0).randn(2, 9, 13, 5))
    k = tf.constant(np.random.RandomState(1).randn(3, 3, 5, 1))
    dy = tf.constant(np.random.RandomState(2).randn(2, 9, 13, 5))
    form = dict(strides=[1, 1, 1, 1], padding="SAME", dilations=(rate, rate), grouped=False)
    with tf.GradientTape() as tape:
        tape.watch([x, k])
        y = tf.nn.depthwise_conv2d(x, k, [1, 1, 1, 1], "SAME", dilations=[rate, rate])
    dx, dk = tape.gradient(y, [x, k], output_gradients=dy)
    np.testing.assert_allclose(conv_kernels.forward(x, k, **form), y, rtol=1e-12)
    if rate == 1:  # TF's own kernels differentiate undilated convs only
        np.testing.assert_allclose(conv_kernels.input_grad(tf.shape(x), k, dy, **form), dx,
                                   rtol=1e-12)
        np.testing.assert_allclose(conv_kernels.filter_grad(x, tf.shape(k), dy, **form), dk,
                                   rtol=1e-12)


@pytest.mark.skipif(bool(tf.config.list_logical_devices("GPU")), reason="a GPU runs it")
def test_grouped_without_a_gpu_is_refused_before_anything_runs():
    """TF's CPU kernels have no grouped-conv gradient (oneDNN's not for every twin): the
    step would fail at its first gradient, so the build refuses in one line."""
    assert not conv_kernels.has_grouped_gradient()
    config = Config.from_flat(width_multiplier=0.125, middle_repeats=1, memory_saving=True,
                              depthwise_kernel="grouped")
    with pytest.raises(InputError, match=r"^--depthwise_kernel=grouped runs on a GPU"):
        builders.model(config, num_classes=3)
    with pytest.raises(ValueError, match="depthwise kernel form"):
        ReluDepthwiseConv2D(3, kernel_form="cudnn")


NATIVE_GRADS = {"DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter"}
GROUPED_GRADS = {"Conv2DBackpropInput", "Conv2DBackpropFilter"}


def _tail_block(form):
    """A `Recompute` block (a ReLU) with a linear depthwise tail of kernel form `form`."""
    x = keras.Input((7, 9, 4))
    return Recompute(keras.Model(x, keras.layers.ReLU()(x)), kernel_form=form,
                     tail=keras.layers.DepthwiseConv2D(3, padding="same", name=f"tail_{form}"))


def test_each_layer_traces_its_own_form_and_its_config_keeps_it(monkeypatch):
    """Twins (and `Recompute` tails) of other forms made in one process each trace their
    own kernels, whichever was made or traced last: "grouped" the grouped Conv2D's ops,
    "native" and "auto" TF's depthwise ones. The form round-trips through the config; a
    config without it (saved before it was a setting) reads "auto"."""
    if not conv_kernels.has_grouped_gradient():
        # Traced, never run: a CPU builds the grouped ops' graph and lacks only their
        # gradient kernels, so the trace asks the device check as a GPU answers it.
        monkeypatch.setattr(conv_kernels, "has_grouped_gradient", lambda: True)
    layers = [maker(form) for form in ("grouped", "native", "auto") for maker in (
        lambda f: ReluDepthwiseConv2D(3, padding="same", kernel_form=f), _tail_block)]
    for layer in layers + layers[:2]:
        ops = {op.type for op in training_ops(layer, (2, 7, 9, 4))}
        grouped = layer.kernel_form == "grouped"
        assert (GROUPED_GRADS <= ops and not NATIVE_GRADS & ops if grouped
                else NATIVE_GRADS <= ops and not GROUPED_GRADS & ops), (layer.name, ops)
        assert type(layer).from_config(layer.get_config()).kernel_form == layer.kernel_form
        config = layer.get_config()
        del config["kernel_form"]
        assert type(layer).from_config(config).kernel_form == "auto"


def kernel_errors():
    """Run in a process with oneDNN on: {case: the grouped form's largest relative
    difference from autodiff of TF's depthwise conv (float32), forward and gradients}."""
    x = tf.constant(np.random.RandomState(0).randn(2, 9, 13, 5), tf.float32)
    k = tf.constant(np.random.RandomState(1).randn(3, 3, 5, 1), tf.float32)
    out = {}
    # oneDNN's grouped gradients take no explicit padding (a GPU's do: benchmarks/gpu.py).
    for name, stride, padding, explicit in (("same", 1, "SAME", ()),
                                            ("valid, stride 2", 2, "VALID", ())):
        strides = [1, stride, stride, 1]
        with tf.GradientTape() as tape:
            tape.watch([x, k])
            y = tf.raw_ops.DepthwiseConv2dNative(input=x, filter=k, strides=strides,
                                                 padding=padding, explicit_paddings=explicit)
        dy = tf.constant(np.random.RandomState(2).randn(*y.shape), tf.float32)
        dx, dk = tape.gradient(y, [x, k], output_gradients=dy)
        form = dict(strides=strides, padding=padding, explicit=explicit, grouped=True)
        # In a graph, as the twins run: oneDNN rewrites graphs' ops, not eager ones.
        got = tf.function(lambda x, k, dy, form=form: (
            conv_kernels.forward(x, k, **form),
            conv_kernels.input_grad(tf.shape(x), k, dy, **form),
            conv_kernels.filter_grad(x, tf.shape(k), dy, **form)))(x, k, dy)
        out[name] = max(float(tf.reduce_max(tf.abs(g - w)) / tf.reduce_max(tf.abs(w)))
                        for g, w in zip(got, (y, dx, dk)))
    return out


def _in_onednn_process(call):
    code = (f"import json; from tests.layers import test_conv_kernels as t; "
            f"print(json.dumps(t.{call}))")
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_grouped_form_computes_the_depthwise_conv():
    """The grouped form's maths (the kernel read as groups, the filter gradient read back),
    where a CPU has the kernels: oneDNN's, in a graph, in a process of its own (the suite's
    TensorFlow runs without oneDNN). Forward and both gradients, "same" and "valid" at
    stride 2. A GPU checks the twins whole (benchmarks/gpu.py's parity)."""
    found = _in_onednn_process("kernel_errors()")
    assert max(found.values()) < 1e-5, found
