"""Whether the ops being built now will be compiled by XLA.

Two of the twins build different ops under XLA: the resize (XLA's own bilinear resize is
not TF's kernel) and the gate of a recomputation (XLA drops control dependencies). They
ask `compiled()`. A graph inside a `tf.function(jit_compile=True)` says so itself. The
backward pass of such a function is built later, by `tape.gradient`, in a graph that
carries the compile attribute only once it is built: the training step builds it inside
`compiling()`, so that the twins' backward passes (a recomputation, a serial branch) see
what they will run under.
"""

import contextlib
import threading

import tensorflow as tf
from tensorflow.python.ops import control_flow_util  # no public name for the XLA context

_STATE = threading.local()


def compiled():
    """True where the ops built now are XLA's: inside a `jit_compile` function, or in a
    block's backward pass that `compiling()` announces."""
    return bool(getattr(_STATE, "depth", 0)) or \
        control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


@contextlib.contextmanager
def compiling(on=True):
    """While entered (with `on`), `compiled()` is True in this thread."""
    _STATE.depth = getattr(_STATE, "depth", 0) + bool(on)
    try:
        yield
    finally:
        _STATE.depth -= bool(on)
