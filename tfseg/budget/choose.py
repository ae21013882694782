"""`--memory_budget_gb` for training: the fastest plan that fits the card.

The budget is the card's memory; the device's own overhead is taken off first
(`tfseg.runtime.device.overhead`: measured on a GPU, 0 on the CPU,
`--device_overhead_gb` when given). Then each plan of the frontier
(`tfseg.budget.frontier`) is predicted by the static estimate of its step
(`tfseg.budget.estimates`: traced in a fresh process, never run, by
`tfseg.profile.measure` with `run_steps=False`):
weights, optimizer state and the batch, plus the simulated peak. Each plan runs
longer than the one before it, so the fastest that fits is the first, in frontier
order, that fits. Where the budget is tight, a prediction within `MARGIN` of it
either way (the simulator's accuracy), one measured step in a fresh process decides
instead.
"""

import dataclasses
import os

from tfseg.config import Config
from tfseg.errors import InputError
from tfseg.budget import fit as fit_lib
# estimate_frontier: re-exported, `tfseg.budget` takes it from here.
from tfseg.budget.estimates import FrontierEstimates, estimate_frontier  # noqa: F401
from tfseg.budget.frontier import Plan
from tfseg.profile import measure as measure_lib
from tfseg.profile.step import StepConfig
from tfseg.runtime import device as device_lib
from tfseg.units import GIB, MIB

# How far a measured device overhead may differ from the one a saved plan was made
# with and still be the same device (the measurement's spread between processes).
OVERHEAD_TOLERANCE = 64 * MIB
# How far the static estimate may be off (tfseg.profile.simulate: within ~15% on
# this project's machines): predictions closer to the budget are measured.
MARGIN = 0.15
# The settings a plan depends on (the step's model, input, optimizer and device use):
# a resumed run whose config.json has a plan for the same keeps it.
PLAN_INPUTS = ("dataset", "crop_size", "batch_size", "backbone", "output_stride", "norm",
               "width_multiplier", "middle_repeats", "dropout", "head_epsilon", "resize",
               "freeze_batch_norm", "momentum", "weight_decay", "weight_decay_type",
               "class_weights", "grad_accum_steps", "dtype_policy", "jit_compile", "strategy",
               "memory_budget_gb", "verify_plan")


@dataclasses.dataclass(frozen=True)
class Choice:
    """The chosen plan and what was known of every frontier point.

    `points`: one dict per plan, in frontier order: its name and settings, the
    predicted and (where verified) measured totals in bytes (None: not needed, or
    `measured_out_of_memory`), and its estimated step time over memory saving's.
    """

    plan: Plan
    budget_bytes: int
    overhead_bytes: int
    points: tuple
    replica: str = ""  # with --strategy=mirrored: the share of the batch planned for

    @property
    def chosen(self):
        return next(p for p in self.points if p["name"] == self.plan.name)

    def line(self):
        point = self.chosen
        measured = point["measured_bytes"]
        checked = f", measured {_gb(measured)}" if measured is not None else ""
        replica = f" {self.replica}" if self.replica else ""
        return (f"memory plan: {self.plan.describe()}: predicted {_gb(point['predicted_bytes'])}"
                f"{checked}{replica} of {_gb(self.budget_bytes - self.overhead_bytes)} (budget "
                f"{_gb(self.budget_bytes)} - device overhead {_gb(self.overhead_bytes)})")

    def to_dict(self):
        return {"plan": dataclasses.asdict(self.plan), "budget_bytes": self.budget_bytes,
                "overhead_bytes": self.overhead_bytes, "frontier": list(self.points),
                "replica": self.replica}


def _gb(size):
    return f"{size / GIB:.3g} GiB"


def choose(step, budget_bytes, overhead, verify=True, log=print, measure=measure_lib.measure,
           margin=MARGIN, stop=None):
    """The fastest plan of `step`'s frontier whose step fits `budget_bytes - overhead`.

    Args:
      step: the `tfseg.profile.step.StepConfig` of the run (its variant is ignored).
      budget_bytes: the card's memory. overhead: bytes of it outside TF's allocator.
      verify: decide by a measured step where a prediction is within `margin` (a
        fraction) of the room, either way.
      log: called with a line per estimate and measurement.
      measure: `tfseg.profile.measure.measure` (a fresh process per call).
      stop: a `tfseg.runtime.signals.StopRequest`: once set, the measurement under way
        is killed and `tfseg.profile.measure.Stopped` raised.

    Raises InputError (one line) when no plan fits: the smallest plan's need and the
    largest batch or square crop that would fit it.
    """
    room = budget_bytes - overhead
    plans = FrontierEstimates(step, log, measure, stop)
    slack = margin if verify else 0.0

    def fits(i):
        """Plan i's step fits: by its prediction, or, within `slack` of the room
        either side, by one measured step."""
        predicted = plans.predicted(i)
        if abs(predicted - room) > slack * room:
            return predicted <= room
        return plans.measured_total(i) <= room

    # Stock first, then the smallest plan: predicted over the room by more than the
    # slack, nothing fits. Then the others, fastest first, each estimated: a plan may
    # keep no less than the one before it (its segment was not what the peak was
    # made of), so none is skipped by bisection.
    count, index = len(plans.plans), len(plans.plans)
    if fits(0):
        index = 0
    elif plans.predicted(count - 1) <= (1 + slack) * room:
        index = next((i for i in range(1, count) if fits(i)), count)
    if index == count:
        smallest = plans.plans[-1]
        need = plans.measured.get(smallest.name) or plans.predicted(count - 1)  # None: unknown
        raise InputError(_nothing_fits(step, smallest, plans.estimate(smallest), need,
                                       budget_bytes, overhead))
    return Choice(plans.plans[index], budget_bytes, overhead, plans.points())


def _nothing_fits(step, plan, estimated, need, budget_bytes, overhead):
    """The one line for a budget nothing fits."""
    fit = fit_lib.fit(estimated, budget_bytes - overhead, step.run.model.output_stride)
    if fit.max_batch >= 1:
        instead = f"batch {fit.max_batch} would fit"
    elif fit.max_square_crop:
        instead = f"batch 1 with a {fit.max_square_crop}x{fit.max_square_crop} crop would fit"
    else:
        instead = "not even batch 1 with the smallest crop would fit"
    return (f"--memory_budget_gb: no plan fits {_gb(budget_bytes)} (minus {_gb(overhead)} "
            f"device overhead): the smallest, {plan.describe()}, needs {_gb(need)} at batch "
            f"{step.batch} and {step.height}x{step.width}; {instead}")


def saved_choice(config, saved, overhead):
    """The `Choice` in a run's saved config dict (its config.json), if it was made for
    the same `PLAN_INPUTS` and device overhead (within `OVERHEAD_TOLERANCE`: a measured
    overhead varies a little between processes); else None."""
    record = saved.get("memory_plan")
    before, now = Config.settings_of(saved), config.flat()
    try:
        if not record or abs(record["overhead_bytes"] - overhead) > OVERHEAD_TOLERANCE or any(
                before.get(name) != now[name] for name in PLAN_INPUTS):
            return None
        plan = Plan(**{**record["plan"], "recompute": tuple(record["plan"]["recompute"])})
        return Choice(plan, record["budget_bytes"], record["overhead_bytes"],
                      tuple(record["frontier"]),
                      record.get("replica", ""))
    except (KeyError, TypeError) as error:  # a hand-edited record: one line, not a traceback
        path = os.path.join(config.run.model_dir, "config.json")
        raise InputError(f"{path}: memory_plan: not a plan tfseg wrote ({type(error).__name__}: "
                         f"{error}); remove the entry to plan again") from None


def replica_config(config, replicas):
    """(the run one replica of a `--strategy=mirrored` run over `replicas` devices
    runs: the largest share of the batch on one device, the line's note).

    Each replica holds the whole model and steps on its share of the global batch;
    its sync batch norm keeps what batch norm keeps. What a replica holds beyond a
    single device's step (the all-reduce's buffers, at most one gradient's size
    with NCCL's chunking) is not estimated."""
    if config.run.strategy != "mirrored":
        return config, ""
    share = -(-config.data.batch_size // replicas)
    return (config.replace(strategy="default", batch_size=share),
            f"per replica (batch {share} of {config.data.batch_size} on {replicas})")


def plan_run(config, num_classes, log=print, saved=None, replicas=1, stop=None):
    """(`config` with the plan's --memory_saving and --recompute, the `Choice`) for
    a training run with --memory_budget_gb; a resumed run keeps the plan in its
    `saved` config dict (`saved_choice`) instead of planning again. With
    --strategy=mirrored over `replicas` devices it plans one replica's step
    (`replica_config`): the budget is each card's.

    Refuses, in one line, a config that already chose them, and --strategy=
    multi_worker (its replicas, on other hosts, are not known here)."""
    run, model = config.run, config.model
    if model.memory_saving or model.recompute:
        given = "--memory_saving" if model.memory_saving else "--recompute"
        raise InputError(f"{given}: --memory_budget_gb chooses --memory_saving and "
                         f"--recompute itself; give either the budget or them")
    if run.strategy == "multi_worker":
        raise InputError("--memory_budget_gb: plans the replicas of this host; with "
                         "--strategy=multi_worker choose --memory_saving and --recompute "
                         "with --mode=report per device")
    overhead = device_lib.overhead(run.device_overhead_gb).bytes
    choice = saved_choice(config, saved or {}, overhead)
    if choice is not None:
        log("memory plan: the one in config.json, made for these settings")
    else:
        replica, note = replica_config(config, replicas)
        step = StepConfig(run=replica, num_classes=num_classes, timed_steps=0)
        choice = dataclasses.replace(choose(
            step, int(run.memory_budget_gb * GIB), overhead, run.verify_plan, log,
            stop=stop), replica=note)
    return config.replace(memory_saving=choice.plan.memory_saving,
                          recompute=choice.plan.recompute), choice
