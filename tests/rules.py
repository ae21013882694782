"""The suite's own rules, as pytest hooks (imported by tests/conftest.py): an unmarked test
over ``slow_seconds`` (setup.cfg) fails, naming itself, so that the fast tier
(-m "not slow") stays fast; slow and grouped tests are collected first.

The limit is the fast tier's: in a run that also holds slow tests (CI's), the unmarked ones
share the cores with the slow tests' own processes (a report's measuring child, two
distributed workers) and get ``shared_factor`` times as long. A test of 3.6 s in the fast
tier took 23.6 s beside them in CI, so a wall-clock limit there says nothing of the test."""

import pytest


def pytest_addoption(parser):
    parser.addini("slow_seconds", "a test whose call takes longer must be marked slow",
                  default="20")
    parser.addini("shared_factor", "the limit's factor in a run that holds slow tests too",
                  default="2")


def _limit(config, session):
    """``slow_seconds``, times ``shared_factor`` where the run holds slow tests too."""
    limit = getattr(config, "_tfseg_slow_limit", None)
    if limit is None:
        limit = float(config.getini("slow_seconds"))
        if any(item.get_closest_marker("slow") for item in session.items):
            limit *= float(config.getini("shared_factor"))
        config._tfseg_slow_limit = limit
    return limit


def pytest_collection_modifyitems(config, items):
    """Slow and grouped tests first: started last, they would be the run's tail while the
    other workers sit idle (the order is stable otherwise, so xdist's workers agree)."""
    def late(item):
        return not (item.get_closest_marker("slow") or item.get_closest_marker("xdist_group"))

    items.sort(key=late)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Fails a test that takes over ``slow_seconds`` (setup.cfg) without the ``slow`` mark,
    naming it, so that the fast tier (-m "not slow") stays fast."""
    outcome = yield
    report = outcome.get_result()
    limit = _limit(item.config, item.session)
    if (report.when == "call" and report.passed and call.duration > limit
            and not (item.get_closest_marker("slow") or item.get_closest_marker("full"))):
        beside = limit > float(item.config.getini("slow_seconds"))
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} took {call.duration:.1f} s, over the {limit:g} s "
                           f"of an unmarked test{' in a run beside slow tests' if beside else ''}"
                           f": mark it @pytest.mark.slow (or make it faster)")
