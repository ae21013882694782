"""The suite's own rules, as pytest hooks (imported by tests/conftest.py): where ``CI`` is
set (``.ci/run`` exports it, as hosted CI services do), an unmarked test over
``slow_seconds`` (setup.cfg; its call's wall time or CPU time, whichever is less) fails, naming itself, so that the fast tier (-m "not slow")
stays fast; elsewhere (a user's laptop, a busy machine: about 30 tests took over 20 s on
2 loaded cores, where nothing was wrong) such tests pass, and the run ends with one line
naming them. Slow and grouped tests are collected first.

The limit is the fast tier's: in a run that also holds slow tests (CI's), the unmarked ones
share the cores with the slow tests' own processes (a report's measuring child, two
distributed workers) and get ``shared_factor`` times as long. A test of 3.6 s in the fast
tier took 23.6 s beside them in CI, so a wall-clock limit there says nothing of the test."""

import os
import resource

import pytest

# The name under which a passing test's report carries its time over the limit, outside
# CI (in user_properties, which xdist sends from its workers to the terminal's process).
OVER = "tfseg_over_slow_limit"
# The name under which a test's item carries its call's CPU time.
CPU = "tfseg_cpu_seconds"


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
def pytest_runtest_call(item):
    """Records the call's CPU time: this process's threads and the children it waited for."""
    before = _cpu_seconds()
    yield
    item.user_properties.append((CPU, _cpu_seconds() - before))


def _cpu_seconds():
    own, children = (resource.getrusage(who) for who in
                     (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _seconds(item, call):
    """The call's wall time or its CPU time, whichever is less. Beside another worker's
    test the wall time grows while the CPU time does not (a test of 2.9 s here took 23.1 s
    in CI); a test that keeps both cores busy has twice its wall time in CPU time. A test
    that only waits is not counted by its CPU time, so it passes."""
    cpu = dict(item.user_properties).get(CPU)
    return call.duration if cpu is None else min(call.duration, cpu)


def _in_ci():
    return bool(os.environ.get("CI"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Where ``CI`` is set, fails a test that takes over ``slow_seconds`` (setup.cfg)
    without the ``slow`` mark, naming it, so that the fast tier (-m "not slow") stays
    fast; elsewhere marks its report for the run's last line (``pytest_terminal_summary``)."""
    outcome = yield
    report = outcome.get_result()
    limit = _limit(item.config, item.session)
    seconds = _seconds(item, call) if report.when == "call" else 0
    if (report.when == "call" and report.passed and seconds > limit
            and not (item.get_closest_marker("slow") or item.get_closest_marker("full"))):
        if not _in_ci():
            report.user_properties.append((OVER, (limit, seconds)))
            return
        beside = limit > float(item.config.getini("slow_seconds"))
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} took {seconds:.1f} s, over the {limit:g} s "
                           f"of an unmarked test{' in a run beside slow tests' if beside else ''}"
                           f": mark it @pytest.mark.slow (or make it faster)")


def pytest_terminal_summary(terminalreporter):
    """Outside CI, one line naming the unmarked tests that took over the limit, slowest
    first: they passed here, and would fail where ``CI`` is set."""
    over = [(*dict(report.user_properties)[OVER][::-1], report.nodeid)
            for report in terminalreporter.stats.get("passed", ())
            if report.when == "call" and OVER in dict(report.user_properties)]
    if over:
        limit = max(limit for _, limit, _ in over)
        tests = ", ".join(f"{nodeid} ({seconds:.1f} s)"
                          for seconds, _, nodeid in sorted(over, reverse=True))
        terminalreporter.write_line(
            f"{len(over)} unmarked test{'s' if len(over) > 1 else ''} took over {limit:g} s, "
            f"a failure where CI is set (mark it @pytest.mark.slow, or make it faster): "
            f"{tests}")
