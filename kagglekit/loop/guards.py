"""A non-finite loss never becomes a checkpoint; stop requests are in ``machine.signals``.

- ``NonFiniteGuard`` notices a NaN or inf loss from the epoch's running loss sum,
  which the loop keeps on the device anyway (no work and no host sync per step);
  ``fit`` reads it where it syncs anyway: every ``AGREE_EVERY`` steps, before every
  save and at the end of each epoch, so a NaN state never becomes a checkpoint.
"""
from __future__ import annotations

import math

from ..machine.signals import Interrupted  # noqa: F401 (kk.guards.Interrupted)


class NonFiniteLoss(RuntimeError):
    """The loss became NaN or inf and no fallback is left."""


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
