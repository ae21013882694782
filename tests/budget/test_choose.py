"""`--memory_budget_gb` for training: the fastest plan whose step fits, predicted by the
static estimate and verified by a measured step (each in a fresh process)."""

import functools

import pytest

from tfseg.errors import InputError
from tfseg.budget import choose
from tfseg.budget.choose import replica_config
from tfseg.profile.measure import measure
from tfseg.profile.step import StepConfig

STEP = StepConfig.of(height=97, width=129, batch=3, timed_steps=0)


def _total(result):
    return result["base_bytes"] + result["peak_over_base_bytes"]


@pytest.mark.full  # run with -m full: .ci/run keeps to 40 minutes
@pytest.mark.xdist_group("measure")
def test_a_budget_between_two_plans_picks_the_faster_that_fits_and_its_step_stays_inside():
    # Each configuration runs once in its fresh process, whoever asks for it (the
    # test or the planner): a cache of the real measurements, not a stand-in.
    run = functools.lru_cache(maxsize=None)(measure)
    stock = run(STEP.replace(variant="stock", recompute_blocks=()))
    saving = run(STEP.replace(variant="memory_saving", recompute_blocks=()))
    # At this size the saving is ~0.25x stock's total (21 of 87 MiB idle; stock keeps
    # ASPP's space-to-batch copies, 46x the input at rate 18 on 7x9), and a
    # process measures up to ~15% high under load: the check below needs only the
    # order, whatever each measured.
    assert _total(saving) < _total(stock)

    # Between the two measured needs: stock (faster) does not fit, memory saving does.
    budget = (_total(stock) + _total(saving)) // 2
    lines = []
    # margin=10: every prediction counts as tight, so each plan tried is decided by its
    # measured step (the same steps as the measurements above).
    choice = choose(STEP, budget, 0, verify=True, log=lines.append, measure=run, margin=10.0)
    assert choice.plan.name == "memory_saving", choice.points
    stock_point, chosen = choice.points[0], choice.chosen
    assert stock_point["name"] == "stock" and stock_point["measured_bytes"] == _total(stock)
    assert chosen["measured_bytes"] == _total(saving) <= budget
    assert chosen["predicted_bytes"] > 0
    assert "verifying memory saving with one measured step ..." in lines
    assert all(p["measured_bytes"] is None for p in choice.points[2:])  # never tried
    assert choice.line().startswith("memory plan: memory saving: predicted ")

    # Below the smallest plan (estimated right after stock): one line with its need and
    # what would fit instead, or that nothing would (at these tiny shapes a recompute
    # segment's second run can cost more than it keeps: the stem's does).
    with pytest.raises(InputError, match=r"no plan fits .* the smallest, memory saving \+ "
                                         r"recompute .* needs .* at batch 3 and 97x129; "
                                         r"((batch [12]|batch 1 with a \d+x\d+ crop) would fit|"
                                         r"not even batch 1 with the smallest crop would fit)"):
        choose(STEP, _total(saving) // 2, 0, verify=False, log=lines.append, measure=run)


@pytest.mark.parametrize("batch, replicas, share", [(5, 2, 3), (8, 4, 2), (2, 1, 2)])
def test_a_mirrored_run_is_planned_as_one_replica_step(batch, replicas, share):
    # Each replica holds the model and steps on its share of the global batch (the
    # largest share where it does not divide), on one device.
    run = STEP.run.replace(strategy="mirrored", batch_size=batch)
    replica, note = replica_config(run, replicas)
    assert replica.data.batch_size == share and replica.run.strategy == "default"
    assert replica.replace(strategy="mirrored", batch_size=batch) == run
    assert note == f"per replica (batch {share} of {batch} on {replicas})"
    # Other strategies plan the step as it is.
    assert replica_config(STEP.run, replicas) == (STEP.run, "")
