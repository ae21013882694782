"""tfseg's exceptions that ``main.py`` turns into exit codes. No TensorFlow import:
the config layer uses them."""


class InputError(ValueError):
    """Bad input from the user: a flag value, a data file, a checkpoint or a config.

    Its message is one line that names the flag (``--crop_size: ...``) or the
    file. ``main.py`` prints it as a usage error and exits with code 2; any other
    exception is a bug and keeps its traceback.
    """


class NonFiniteLoss(RuntimeError):
    """The loss became NaN or Inf; the last good checkpoint is kept, the bad state is
    not saved. ``main.py`` exits with code 3."""
