"""Stop requests: Kaggle's Stop button (SIGINT in the kernel), a SIGTERM, or a launched
rank's parent asking; the fit loop finishes its step, saves a resumable checkpoint (all ranks
agreeing) and raises ``Interrupted``. A second Ctrl-C stops at once.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading


class Interrupted(KeyboardInterrupt):
    """The run was asked to stop (Ctrl-C, Kaggle's Stop button, SIGTERM) and saved first."""


_requested = threading.Event()  # set by a signal, by launch's ranks on SIGTERM, or by hand


def request_stop() -> None:
    """Ask the running fit to save and stop (what a SIGTERM does)."""
    _requested.set()


def stop_requested() -> bool:
    return _requested.is_set()


class Interrupts:
    """While active, SIGINT and SIGTERM ask for a clean stop instead of killing mid-step.

    Signal handlers can only be set in the main thread; elsewhere (or when ``enabled`` is
    False) only ``request_stop`` works.
    """

    def __init__(self, enabled: bool = True):
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.previous: dict = {}

    def _handle(self, signum, frame) -> None:
        if signum == signal.SIGINT and _requested.is_set():  # asked twice: stop now
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        _requested.set()
        print(f"kagglekit: {signal.Signals(signum).name} received: saving a checkpoint after this "
              "step, then stopping (Ctrl-C again stops at once)", file=sys.stderr, flush=True)

    def __enter__(self) -> Interrupts:
        # A request already pending is kept: a launched rank told to stop (SIGTERM from its
        # parent) while it still prepared its data must stop at the first step, not train on.
        if self.enabled:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        _requested.clear()


@contextlib.contextmanager
def keyboard_interrupts():
    """While active, SIGINT raises KeyboardInterrupt in the main thread, whatever this process
    inherited. Python installs that handler at start-up only when SIGINT is not ignored, and a
    process started as a background job of a non-interactive shell (a CI runner, ``make test &``)
    inherits it ignored: a Stop press sent to it would be lost and the ranks would train on."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def alive(pid: int) -> bool:
    """Does process ``pid`` still run (another user's counts)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
