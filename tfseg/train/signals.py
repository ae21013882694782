"""Turns SIGTERM / SIGINT into a request that the training loop honours between steps."""

import signal


class StopRequest:
    """A flag set by SIGTERM or SIGINT, checked by the loop after each step.

    Stopping between steps (rather than raising inside a signal handler) means
    the checkpoint written on the way out holds a consistent step, weights and
    optimizer state. A second signal of the same kind falls back to Python's
    default (e.g. a second Ctrl-C raises KeyboardInterrupt at once).
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.signal = None
        self._previous = {}

    def __enter__(self):
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        return False

    def _handle(self, signum, frame):
        self.signal = signal.Signals(signum).name
        signal.signal(signum, self._previous.get(signum, signal.SIG_DFL))

    def __bool__(self):
        return self.signal is not None
