"""The signals that may interrupt a write of ``tfseg.io.outputs``, and what they do to it.

Where SIGTERM or SIGINT would end the process at once (their default handling: predict,
export, convert and report run so), they end the write instead: one that arrives while
an output is built removes what was built, one that arrives while it is renamed into
place waits for the last rename; then the signal takes its usual course (the process
ends with it). Where a handler of tfseg's own is in place (training and eval stop
between steps), nothing changes: the write finishes. No TensorFlow.

Example:
    with SignalGuard() as guard:   # a SIGTERM from here raises Interrupted
        build_the_output()
        guard.hold = True          # from here it waits: delivered when the block ends
        rename_it_into_place()
"""

import os
import signal
import sys
import threading

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(BaseException):
    """A signal during a write (a BaseException, as KeyboardInterrupt: not an error that
    code in between may handle)."""


class SignalGuard:
    """SIGTERM and SIGINT, where their handling is the default, end the write instead of
    the process (see the module), then are delivered as they would have been."""

    def __init__(self):
        self.signum = None
        self.hold = False  # True while renaming into place or cleaning up: no raising
        self._again = False  # raise once more: the first raise was lost in a finalizer
        self._previous = {}
        self._hook = self._timer = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in _SIGNALS:
                if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
                    self._previous[sig] = signal.signal(sig, self._handle)
            if self._previous:
                self._hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        return self

    def _handle(self, signum, frame):
        first = self.signum is None
        self.signum = self.signum or signum
        if (first or self._again) and not self.hold:
            self._again = False
            raise Interrupted(signal.Signals(signum).name)

    def _unraisable(self, unraisable):
        """A signal that lands while a finalizer (`__del__`, TensorFlow's freeing of a
        function) runs raises there, and Python ignores what a finalizer raises: the
        write would go on and a traceback be printed. It is raised again instead, in the
        code the finalizer interrupted."""
        if isinstance(unraisable.exc_value, Interrupted) and self.signum is not None:
            # From another thread, a little later: a signal raised here would be handled
            # here, in this hook, which ignores what it raises too.
            self._again = True
            self._timer = threading.Timer(0.01, os.kill, (os.getpid(), self.signum))
            self._timer.start()
        else:
            self._hook(unraisable)

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        if self._previous:
            sys.unraisablehook = self._hook
        if self._timer is not None:
            self._timer.cancel()
        self._previous = {}
        if self.signum is not None:
            # Its usual course, now that the output is whole: the default handling ends
            # the process (SIGINT raises KeyboardInterrupt).
            sys.stdout.flush()
            sys.stderr.flush()
            signal.raise_signal(self.signum)
        return False
