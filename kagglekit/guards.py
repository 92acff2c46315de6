"""What stops a long run cleanly instead of silently: non-finite losses, interrupts.

- ``NonFiniteGuard`` notices a NaN or inf loss from the epoch's running loss sum,
  which the loop keeps on the device anyway (no work and no host sync per step);
  ``fit`` reads it where it syncs anyway: every ``AGREE_EVERY`` steps, before every
  save and at the end of each epoch, so a NaN state never becomes a checkpoint.
- ``Interrupts``: Kaggle's Stop button (SIGINT in the kernel) or a SIGTERM asks the
  run to stop; ``fit`` finishes the step in progress, saves a resumable checkpoint
  (all ranks agreeing) and raises ``Interrupted``. A second Ctrl-C stops at once.
"""
from __future__ import annotations

import math
import signal
import sys
import threading


class NonFiniteLoss(RuntimeError):
    """The loss became NaN or inf and no fallback is left."""


class Interrupted(KeyboardInterrupt):
    """The run was asked to stop (Ctrl-C, Kaggle's Stop button, SIGTERM) and saved first."""


class NonFiniteGuard:
    """Notices a NaN or inf loss without any work per step.

    The epoch's running loss sum, kept on the device by the loop anyway, turns NaN or
    inf with the first bad step and stays so; reading it where the loop syncs says
    whether a step since the last check went bad (and costs one host sync there).
    """

    def __init__(self, step: int = 0):
        self.checked_step = step

    def found(self, loss_sum, step: int) -> tuple[int, int, float] | None:
        """(first step that may be bad, step now, the loss sum) when a loss was not finite."""
        value = float(loss_sum)
        since, self.checked_step = self.checked_step, step
        return None if math.isfinite(value) else (since + 1, step, value)


def advice(steps: tuple[int, int], loss: float, precision: str, checkpoint: str | None) -> str:
    kept = f"the latest checkpoint ({checkpoint}) is the last good state" if checkpoint \
        else "no checkpoint was written"
    return (f"the training loss became {loss} between steps {steps[0]} and {steps[1]} "
            f"({precision}); training stopped and "
            f"{kept}. Lower the learning rate or add warm-up, clip gradients (clip_grad_norm=1.0), "
            "and check the data for NaN or inf values (a NaN in one batch spreads to every weight).")


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

    def __enter__(self) -> "Interrupts":
        _requested.clear()
        if self.enabled:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        _requested.clear()
