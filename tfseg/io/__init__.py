"""Files written whole, and the signals that may interrupt them: below every package that
writes (``tfseg.data`` writes TFRecords), with no TensorFlow."""
