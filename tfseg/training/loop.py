"""A training run: assembled once (``tfseg.training.assembly``: every part its config
describes, built while the run holds its model folder), restored or initialised, and
stepped (``tfseg.training.stepper``: log, evaluate, checkpoint; a clean stop on signals or
NaN)."""

import contextlib

import numpy as np

from tfseg.runtime import files, init
from tfseg.runtime.signals import StopRequest
from tfseg.training.assembly import assemble, build_step  # noqa: F401 (the profiler's)
from tfseg.training.stepper import Stepper


def train(config, saved, resuming, log=print, stop=None, record=None):
    """Trains until ``config.optim.train_steps``, resuming from ``config.run.model_dir``.

    ``saved``, ``resuming``: the folder as the run finds it, its config.json as
    ``tfseg.runtime.files.load_config`` reads it ({} for none) and whether it holds a
    checkpoint (``files.latest_checkpoint``): the record is checked before anything is
    written (``assemble``).

    SIGTERM/SIGINT are caught from the start (``stop``: a ``StopRequest`` the
    caller entered earlier, else one of its own): during set-up they end the run
    before its first step; in training, after the step under way, with a save.

    Returns:
      A dict: "step" reached, "loss" (last), "stopped_by" (None, "SIGTERM", "SIGINT"),
      "checkpoint" (the last saved path).

    ``record``: more entries for the run's config.json (e.g. the memory plan that
    chose the model's variant, ``tfseg.budget.Choice.to_dict``).

    Raises:
      NonFiniteLoss: the loss was NaN/Inf, or too many updates in a row were skipped
        (nothing is saved after the last good step).
      InputError: bad flags or files, or another run holds ``model_dir``.

    Example:
        model_dir = Config().run.model_dir
        train(Config(), files.load_config(model_dir),
              files.latest_checkpoint(model_dir) is not None)
    """
    with contextlib.nullcontext(stop) if stop is not None else StopRequest() as stop:
        run = assemble(config, saved, resuming, log)
        with run:  # holds model_dir until the run ends
            return _train(run, stop, log, record)


def _train(run, stop, log, record=None):
    """Prepares ``run`` (``_prepare``), then steps it (``Stepper``) unless it is done or a
    stop came during set-up."""
    restored = _prepare(run, log, record)
    start, steps = int(run.step.numpy()), run.config.optim.train_steps
    result = dict(step=start, loss=None, stopped_by=None, checkpoint=restored)
    if start >= steps:
        log(f"already trained to step {start} (--train_steps={steps})")
        return result
    if stop:
        result["stopped_by"] = stop.signal
        log(f"{stop.signal} during set-up: stopped before the first step; nothing to save")
        return result
    return Stepper(run, stop, log, result).run()


def _xla_words(run):
    """How the step is compiled, in the run's first lines: "XLA blocks (--jit_compile=
    auto on a GPU)", "no XLA", ..."""
    words = {"off": "no XLA", "step": "XLA: the whole step", "blocks": "XLA: blocks"}[run.jit]
    if run.config.run.jit_compile != "auto":
        return words
    return words + (" (--jit_compile=auto: a GPU)" if run.jit == "blocks" else
                    " (--jit_compile=auto: no GPU)")


def _prepare(run, log, record):
    """The checkpoint ``run`` resumed from, or None: restored (or initialised from
    ``--init_checkpoint``), said, and its config.json saved."""
    config = run.config
    settings, optim_settings = config.run, config.optim
    if run.ckpts.chief:
        run.ckpts.remove_leftovers()  # of saves a kill interrupted; we hold the folder's lock
    restored = run.ckpts.resume(log)
    if restored is None and settings.init_checkpoint:
        init.load(run.model, settings.init_checkpoint, log)  # weights only: step 0
    start = int(run.step.numpy())
    # A checkpoint saved before the count was kept restores none: the input goes on at
    # its step (the count is the step plus the skipped updates, never less).
    run.read.assign(max(int(run.read.numpy()), start * optim_settings.grad_accum_steps))
    log(f"{run.model.name}: {run.model.count_params():,} parameters, "
        f"{run.source.num_classes} classes, {run.norm} norm, "
        f"{run.strategy.num_replicas_in_sync} replica(s), {_xla_words(run)}; "
        + (f"resumed from {restored} at step {start}" if restored else
           f"from the weights of {settings.init_checkpoint}"
           if settings.init_checkpoint else "from scratch"))
    if run.ckpts.chief:
        log(f"{optim_settings.train_steps:,} steps of batch {config.data.batch_size} at "
            f"{'x'.join(map(str, config.data.crop_size))}; checkpoints every "
            f"{settings.checkpoint_every} steps, config.json and TensorBoard logs in "
            f"{settings.model_dir}")
        # Class names and palette too: predict and export then need no data set.
        files.save_config(config, settings.model_dir,
                          class_names=list(run.source.class_names),
                          palette=np.asarray(run.source.palette).tolist(), **(record or {}))
    return restored
