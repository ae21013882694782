"""Turns SIGTERM / SIGINT into a request that training and evaluation honour between steps."""

import signal
import sys


class StopRequest:
    """A flag set by SIGTERM or SIGINT, checked by the loop after each step.

    Stopping between steps (rather than raising inside a signal handler) means
    the checkpoint written on the way out holds a consistent step, weights and
    optimizer state. Further signals change nothing, so that a second Ctrl-C
    cannot raise KeyboardInterrupt inside the exit save and lose it. The exit after a
    stop is prompt (a step, a save, well under a second on small runs), and
    SIGKILL still ends a run that is stuck.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.signal = None
        self._previous = {}

    def __enter__(self):
        if self._previous:  # already in place (main.py enters it before its imports)
            return self
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
        return False

    def _handle(self, signum, frame):
        if self.signal is None:
            self.signal = signal.Signals(signum).name
        else:
            print(f"tfseg: {signal.Signals(signum).name} again: still stopping after "
                  f"{self.signal}, saving first", file=sys.stderr, flush=True)

    def __bool__(self):
        return self.signal is not None
