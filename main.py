"""tfseg command line. Flags are defined and read here only."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

MODES = ("smoke", "summary")
flags.DEFINE_enum("mode", "smoke", MODES, "What to run.")
flags.DEFINE_integer("num_classes", 21, "Number of classes.", lower_bound=1)
flags.DEFINE_enum("output_stride", "16", ["8", "16", "32"], "Encoder output stride.")
flags.DEFINE_enum("norm", "batch", ["batch", "sync_batch", "group"], "Normalisation.")
flags.DEFINE_float("width_multiplier", 1.0, "Channel width multiplier.", lower_bound=0.01)
flags.DEFINE_integer("middle_repeats", 16, "Middle-flow units.", lower_bound=1)
FLAGS = flags.FLAGS


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    import numpy as np
    import keras

    from tfseg.models import deeplab_v3_plus

    model = deeplab_v3_plus(
        FLAGS.num_classes,
        output_stride=int(FLAGS.output_stride),
        norm=FLAGS.norm,
        width_multiplier=FLAGS.width_multiplier,
        middle_repeats=FLAGS.middle_repeats,
    )
    print(f"{model.name}: {model.count_params():,} parameters")
    if FLAGS.mode == "summary":
        model.summary()
        return 0
    model.compile(
        keras.optimizers.SGD(0.01, momentum=0.9),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    rng = np.random.RandomState(0)
    images = rng.uniform(-1, 1, (1, 129, 129, 3)).astype("float32")
    labels = rng.randint(0, FLAGS.num_classes, (1, 129, 129))
    print(f"one training step, loss {float(model.train_on_batch(images, labels)):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(app.run(main))
