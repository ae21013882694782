"""Checkpoints keyed by variable path, with ``tf.train.CheckpointManager`` rotation and resume.

Crash safety: ``CheckpointManager.save`` writes the variables into a ``ckpt-N_temp``
folder, merges them into the ``ckpt-N.data-*`` and ``ckpt-N.index`` files, and only
then rewrites the small ``checkpoint`` state file (itself written to a temp file and
renamed). The merged files are not renamed into place: a ``kill -9`` during the merge
can leave a truncated ``ckpt-N.index`` that the state file does not name. Resume goes
by the state file, so that checkpoint is never read (``--checkpoint=ckpt-N`` on it is
one line naming it), and the temp folder is removed at the next start
(``remove_leftovers``). So a kill at any point leaves the latest checkpoint named
complete: either the new one or the one before. Rotation writes the state file before it
deletes the oldest checkpoint: a kill in between leaves the state listing it, gone, and
``resume`` rewrites the list (tests/train/test_faults.py kills runs 10 times).
"""

import glob
import os
import shutil

import tensorflow as tf

from tfseg import memory
from tfseg.errors import InputError
from tfseg.runtime.files import (latest_checkpoint, listed_checkpoints, named_checkpoint, on_disk,
                                 step_of, write_state)
from tfseg.runtime.state import (DamagedCheckpoint, VanishedCheckpoint, check_matches, damaged,
                                 optimizer_state, rng_state)


def is_chief(strategy):
    """True on the one worker that owns ``model_dir`` (always true on one machine)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    return resolver.task_type in ("chief", None) or (
        resolver.task_type == "worker" and resolver.task_id == 0
        and "chief" not in resolver.cluster_spec().as_dict())


def one_worker(strategy):
    """True where the run has no other worker, whom a save would have to wait for."""
    resolver = getattr(strategy, "cluster_resolver", None)
    spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
    return sum(len(spec.get(kind, [])) for kind in ("chief", "worker")) <= 1


def checkpoint_dir(model_dir, strategy):
    """Where ``save`` writes: ``model_dir`` on the chief; a scratch folder on other workers.

    MultiWorkerMirroredStrategy needs every worker to take part in a save
    (the variables' values are gathered collectively), but only the chief's
    files are kept. Every worker restores from ``model_dir`` (``Checkpoints.latest``).
    """
    if is_chief(strategy):
        return model_dir
    return os.path.join(model_dir, f"worker_tmp_{strategy.cluster_resolver.task_id}")


class Checkpoints:
    """Save/restore of model weights and optimizer state (both by path) and step, in
    ``model_dir``.

    Weights and momentum slots are keyed by variable path, so stock,
    memory-saving and recompute models resume each other's checkpoints.
    """

    def __init__(self, model, model_dir, strategy=None, keep=3, optimizer=None, **others):
        strategy = strategy or tf.distribute.get_strategy()
        self.model = model
        self.model_dir = model_dir
        self.chief = is_chief(strategy)
        self.directory = checkpoint_dir(model_dir, strategy)
        self.state = dict(others, rng=rng_state(model))
        if optimizer is not None:
            self.state["optimizer"] = optimizer_state(optimizer, model)
        self.checkpoint = memory.checkpoint(model, **self.state)
        self.keep = keep
        self._manager = None

    @property
    def manager(self):
        """The ``CheckpointManager`` that saves and rotates, made on first use: it reads
        the state file, which ``resume`` may first have to rebuild (eval needs none)."""
        if self._manager is None:
            self._manager = tf.train.CheckpointManager(self.checkpoint, self.directory,
                                                       max_to_keep=self.keep)
        return self._manager

    @property
    def latest(self):
        """The chief's latest checkpoint in ``model_dir``, on every worker.

        Not ``manager.latest_checkpoint``: on other workers that names a file in
        their scratch folder, which is deleted after each save.
        """
        return latest_checkpoint(self.model_dir)

    def restore(self, path=None):
        """Restores ``path`` or the latest checkpoint; returns the path, or None if there is none.

        The model's weights, and the optimizer state and step this object saves,
        must all be in the checkpoint (``check_matches``); other entries may be
        left over (eval builds no optimizer).
        """
        path = path or self.latest
        if path is None:
            return None
        if not tf.io.gfile.exists(path + ".index"):
            raise VanishedCheckpoint(path)  # named a moment ago: rotation removed it
        check_matches(path, self.model, self.state)
        try:
            self.checkpoint.restore(path).expect_partial()
        except (tf.errors.OpError, IndexError, ValueError) as error:  # IndexError: short .data
            raise damaged(path, error) from None
        return path

    def resume(self, log=print):
        """Restores the newest readable checkpoint to train on; returns its path, or None
        when ``model_dir`` has no checkpoint files at all.

        Never starts afresh over a run's checkpoints: a missing or unreadable
        ``checkpoint`` state file is rebuilt from the ``ckpt-N`` files on disk, and a
        damaged latest checkpoint falls back to the one before, each with a warning
        naming what was skipped (it stays on disk, and is overwritten only when
        training reaches its step again).

        Raises:
          InputError: every checkpoint is damaged (naming the folder), or they are
            another architecture's (``check_matches``).
        """
        named = named_checkpoint(self.model_dir)
        candidates = [named] if named else []
        candidates += [path for path in on_disk(self.model_dir)
                       if not named or step_of(path) < step_of(named)]
        state_file = os.path.join(self.model_dir, "checkpoint")
        if not candidates:
            if self.chief and os.path.exists(state_file):
                os.remove(state_file)  # it names no checkpoint that exists: nothing is lost
            return None
        if named is None:
            log(f"warning: {self.model_dir}/checkpoint is missing or unreadable; resuming "
                f"from the newest of the {len(candidates)} checkpoint(s) on disk instead")
        for path in candidates:
            try:
                self.restore(path)
            except DamagedCheckpoint as error:
                log(f"warning: {error}; trying the one before")
                continue
            older = [p for p in candidates if step_of(p) < step_of(path)]
            # CheckpointManager writes the state file, then deletes the oldest checkpoint,
            # then writes the state again: a kill in between leaves the state listing a
            # checkpoint that is gone. Rewritten here, as after a fallback, it lists the
            # restored checkpoint and the ones before it on disk, which rotation counts.
            gone = [p for p in listed_checkpoints(self.model_dir)
                    if not tf.io.gfile.exists(p + ".index")]
            if (path != named or gone) and self.chief:
                write_state(self.directory, path, older)
                self._manager = None
            return path
        raise InputError(f"--model_dir: every checkpoint in {self.model_dir} is damaged or "
                         f"unreadable ({', '.join(os.path.basename(p) for p in candidates)}); "
                         f"move them away to train from scratch")

    def save(self, step):
        """Saves checkpoint ``step``; returns its path.

        Raises:
          InputError: the save failed (a full disk, a file-size limit, a read-only
            folder): one line naming the folder, the reason and the checkpoint that
            is still the latest (or that there is none yet). The partial files are
            removed first.
        """
        try:
            path = self.manager.save(checkpoint_number=step)
        except (tf.errors.OpError, OSError) as error:
            self._remove_partial(step)
            reason = (error.message if isinstance(error, tf.errors.OpError)
                      else str(error)).strip().splitlines()[0].split("; ")[-1]
            kept = (f"the latest is still {self.latest}" if self.latest
                    else "there is no checkpoint yet")
            raise InputError(f"--model_dir: could not save checkpoint {step} in "
                             f"{self.directory} ({reason}); {kept}") from None
        if not self.chief:
            # The other workers' copies are only needed to take part in the save.
            shutil.rmtree(self.directory, ignore_errors=True)
        return path

    def _remove_partial(self, step):
        """Removes what a failed save of ``step`` wrote: its temp folder and any of its
        files (the state file, written last, does not name them)."""
        prefix = os.path.join(self.directory, f"ckpt-{step}")
        shutil.rmtree(prefix + "_temp", ignore_errors=True)
        for partial in glob.glob(glob.escape(prefix) + ".*"):
            os.remove(partial)

    def remove_leftovers(self):
        """Deletes the ``ckpt-N_temp`` folders of saves that a kill interrupted (run it
        while holding the model folder's lock: a live run's save would lose its files)."""
        # "ckpt" is CheckpointManager's default checkpoint_name.
        for leftover in glob.glob(os.path.join(glob.escape(self.directory), "ckpt-*_temp")):
            shutil.rmtree(leftover, ignore_errors=True)
