"""Functions handed to tf.data are traced as written, without autograph's conversion.

Each of tfseg's uses ``tf.cond``/``tf.where``, never Python control flow on tensors, so
the conversion changes nothing in them, and it cost ~3 s of the ~19 s start-up of a
tiny training run (19.1 s -> 16.0 s on 2 cores), at every train, eval and predict. A
Python ``if`` on a tensor in such a function fails loudly when traced, not silently.
"""

import tensorflow as tf

plain = tf.autograph.experimental.do_not_convert
