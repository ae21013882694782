"""The suite's own rules, as pytest hooks (imported by tests/conftest.py): an unmarked test
over ``slow_seconds`` (setup.cfg) fails, naming itself, so that the fast tier
(-m "not slow") stays fast; slow and grouped tests are collected first."""

import pytest


def pytest_addoption(parser):
    parser.addini("slow_seconds", "a test whose call takes longer must be marked slow",
                  default="20")


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
    limit = float(item.config.getini("slow_seconds"))
    if (report.when == "call" and report.passed and call.duration > limit
            and not (item.get_closest_marker("slow") or item.get_closest_marker("full"))):
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} took {call.duration:.1f} s, over the {limit:g} s "
                           f"of an unmarked test: mark it @pytest.mark.slow (or make it faster)")
