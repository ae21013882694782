"""What a training step costs the host beside its memory: the TensorFlow ops one warm step
executes, the seconds XLA took to compile it, and the XLA blocks' time.

The figures `benchmarks/launches.py` makes (docs/benchmarks.md, "Launches a training step
makes"), made the same way inside a measuring process (`tfseg.profile.child`):

- `ops_per_step`: the ops TensorFlow's executor ran in one warm step under the profiler
  (`tfseg.profile.timeline`: an XLA computation's launch is one op, as it is to the
  executor; `async_ops_per_step` counts those launches among them);
- `compile_seconds`: the first step's time less a warm step's, the first step being the
  one that traces and compiles; None where the step runs without XLA (`--jit_compile=off`,
  or `auto` on a CPU), whose first step only traces;
- `time_by_block`: the profiled step's XLA time by block, forward and backward
  (`tfseg.profile.timeline.by_block`): {} unless `--jit_compile=blocks`.

Example:

    >>> from tfseg.profile import child, launches
    >>> from tfseg.profile.step import StepConfig, build_step
    >>> config = StepConfig.of(height=33, width=49, batch=1, width_multiplier=0.125,
    ...                        middle_repeats=1, num_classes=5)
    >>> strategy, _, _, step = build_step(config)
    >>> batch = child.sample_batch(config, strategy)
    >>> _ = float(step(batch)[0])  # the first step: traced (and compiled) here
    >>> figures = launches.count(lambda: float(step(batch)[0]), "/tmp/tfseg_launches")
    >>> figures.ops_per_step > 100, figures.time_by_block
    (True, {})
"""

import dataclasses
import tempfile

from tfseg.profile import timeline


@dataclasses.dataclass(frozen=True)
class Launches:
    """One warm step's executed ops (all, and of them the asynchronous ones, XLA's
    launches) and the XLA time of each block, {block: {"forward": s, "backward": s}}."""

    ops_per_step: int
    async_ops_per_step: int
    time_by_block: dict

    def to_dict(self):
        return dataclasses.asdict(self)


def count(run_step, logdir=None):
    """`Launches` of one call of `run_step` (a warm step that ends by reading a value, so
    that the device has finished) under TensorFlow's profiler.

    Args:
      run_step: runs one training step, already traced and compiled: a first step's
        ops would count the tracing's and compilations' too.
      logdir: where the profiler writes its trace (None: a fresh temporary folder).
    """
    if logdir is None:  # the trace is read here and not kept
        with tempfile.TemporaryDirectory(prefix="tfseg_launches_") as folder:
            return count(run_step, folder)
    summary = timeline.profile(run_step, logdir)
    host = summary["host"]
    return Launches(ops_per_step=host["ops"], async_ops_per_step=host["async_ops"],
                    time_by_block=summary["by_block"])


def compile_seconds(mode, first_seconds, warm_seconds):
    """The seconds compilation added to the first step: its time less a warm step's
    (never below 0), or None where `mode` (`tfseg.runtime.builders.jit_mode`'s: "off",
    "step" or "blocks") compiles nothing.

    Example: ``compile_seconds("blocks", 47.4, 0.11)`` is about 47.3;
    ``compile_seconds("off", 3.0, 0.1)`` is None."""
    if mode == "off":
        return None
    return max(0.0, first_seconds - warm_seconds)
