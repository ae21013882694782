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


class TrainedSettingError(InputError):
    """Settings given to ``--mode=eval``, ``predict`` or ``export`` that the trained
    checkpoint's model cannot have: ``settings`` holds (flag name, value given, value
    trained), as flag text, of each; the message names the first and says to leave it out.

    Example::

        error = TrainedSettingError([("width_multiplier", "1.0", "0.125")], "run/ckpt-3",
                                    "run/config.json")
        error.naming_recipes({"width_multiplier": "camvid"})   # "... give
        # --width_multiplier=0.125 after --recipe=camvid to use the trained model's"
    """

    def __init__(self, settings, checkpoint, record):
        self.settings = tuple(settings)
        name, given, trained = self.settings[0]
        self.why = (f"the checkpoint {checkpoint} was trained with --{name}={trained} "
                    f"({record})")
        super().__init__(f"--{name}={given}: {self.why}; leave --{name} out to use the "
                         f"trained model's")

    def naming_recipes(self, recipe_of):
        """The message, where ``recipe_of`` ({flag name: recipe}) says that a recipe gave
        the first setting: naming that recipe, and the trained values of the settings it
        gave, to put after it (a recipe's line cannot be left out)."""
        name, given, _ = self.settings[0]
        recipe = recipe_of.get(name)
        if recipe is None:
            return str(self)
        trained = " ".join(f"--{n}={value}" for n, _, value in self.settings
                           if recipe_of.get(n) == recipe)
        return (f"--{name}={given} (from --recipe={recipe}): {self.why}; give {trained} "
                f"after --recipe={recipe} to use the trained model's")
