"""A report's clock: its time bound, its progress lines, and the stop request it
honours between measurements."""

import time

from tfseg.profile.measure import Stopped


def duration(seconds):
    """`seconds` as a reader wants it: "40 s", "3 min"."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


class Clock:
    """How long a report has left, and what it has done of what it planned.

    Args:
      max_minutes: the time bound from the clock's start (None or 0: none). Past it,
        `allows` refuses every run not yet started (the run under way finishes).
      stop: a `tfseg.runtime.signals.StopRequest` (or None): `check` raises
        `tfseg.profile.measure.Stopped` once it is set.
      log: called with the progress lines.
      now: the clock (seconds).

    Example:
        clock = Clock(max_minutes=10, log=print)
        clock.plan("verifying", {"stock": [30.0, 30.0, 12.0]})
        if clock.allows(30.0):
            ...  # the run
            clock.done("stock")   # "1/3 measured, about 42 s left"
    """

    def __init__(self, max_minutes=None, stop=None, log=print, now=time.monotonic):
        self.now, self.stop, self.log = now, stop, log
        self.start = now()
        self.deadline = self.start + 60.0 * max_minutes if max_minutes else None
        self.max_minutes = max_minutes or None
        self.bound_reached = False
        self._pending, self._count = {}, 0

    def check(self):
        """Raises `Stopped` once a stop was requested: called between measurements."""
        if self.stop:
            raise Stopped(getattr(self.stop, "signal", None))

    def elapsed(self):
        return self.now() - self.start

    def allows(self, seconds=0.0):
        """Whether a run estimated at `seconds` may start: it ends within the bound.
        Once one is refused, every later one is (the bound is reached)."""
        self.check()
        if self.deadline is not None and self.now() + seconds > self.deadline:
            self.bound_reached = True
        return not self.bound_reached

    def plan(self, what, estimates):
        """Announces that `what` is about to run: `estimates` is {key: [seconds of each
        run planned for it]} (a variant's runs, say), and the bound."""
        self._pending = {key: list(runs) for key, runs in estimates.items()}
        self._count = 0
        bound = ""
        if self.deadline is not None:
            left = self.deadline - self.now()
            bound = (f"; bounded at {self.max_minutes:g} min, {duration(left)} of it left"
                     if left > 0 else f"; the bound of {self.max_minutes:g} min is passed: "
                     f"none will start")
        runs = [s for r in self._pending.values() for s in r]
        self.log(f"{what}: {len(runs)} runs planned, about {duration(sum(runs))}{bound}")

    def finish(self, key):
        """`key`'s runs still planned will not be made (it is settled)."""
        self._pending.pop(key, None)

    def done(self, key, what="measured"):
        """One of `key`'s runs is done: logs "k/N measured, about S left"."""
        self._count += 1
        if self._pending.get(key):
            self._pending[key].pop(0)
        left = [s for r in self._pending.values() for s in r]
        self.log(f"{self._count}/{self._count + len(left)} {what}, about "
                 f"{duration(sum(left))} left")
