"""What stops a long run cleanly instead of silently: non-finite losses, interrupts.

- ``NonFiniteGuard`` watches every step's loss for NaN or inf on the device itself
  (a flag and the first bad step kept as tensors: no host sync per step). ``fit``
  reads it where it syncs anyway: every ``AGREE_EVERY`` steps, before every save and
  at the end of each epoch, so a NaN state never becomes a checkpoint.
- ``Interrupts``: Kaggle's Stop button (SIGINT in the kernel) or a SIGTERM asks the
  run to stop; ``fit`` finishes the step in progress, saves a resumable checkpoint
  (all ranks agreeing) and raises ``Interrupted``. A second Ctrl-C stops at once.
"""
from __future__ import annotations

import signal
import sys
import threading

import torch


class NonFiniteLoss(RuntimeError):
    """The loss became NaN or inf and no fallback is left."""


class Interrupted(KeyboardInterrupt):
    """The run was asked to stop (Ctrl-C, Kaggle's Stop button, SIGTERM) and saved first."""


class NonFiniteGuard:
    def __init__(self, device: torch.device):
        self.bad_step = torch.full((), -1, dtype=torch.long, device=device)
        self.bad_loss = torch.zeros((), dtype=torch.float32, device=device)

    def observe(self, loss: torch.Tensor, step: int) -> None:
        """Remember the first non-finite loss (device operations only)."""
        first = ~torch.isfinite(loss.detach().float()) & (self.bad_step < 0)
        self.bad_step.masked_fill_(first, step)
        self.bad_loss = torch.where(first, loss.detach().float(), self.bad_loss)

    def found(self) -> tuple[int, float] | None:
        """(step, loss) of the first non-finite loss since the last reset; one host sync."""
        step = int(self.bad_step)
        return None if step < 0 else (step, float(self.bad_loss))

    def reset(self) -> None:
        self.bad_step.fill_(-1)


def advice(step: int, loss: float, precision: str, checkpoint: str | None) -> str:
    kept = f"the latest checkpoint ({checkpoint}) is the last good state" if checkpoint \
        else "no checkpoint was written"
    return (f"the training loss became {loss} at step {step} ({precision}); training stopped and "
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
