"""The fp16 GradScaler's health: its scale, and the steps it skipped, per epoch.

A step whose scaled gradients hold inf or NaN is skipped and the scale halved; a healthy run
skips a few steps while the scale settles (from 65,536 down to what the gradients allow), then
almost none. A scale that keeps falling, or a run that skips many steps, trains less than it
counts: fp16's range does not hold this model's gradients (fp32, or bf16 on a card that has it,
would). Counted on the device, one comparison per step, read once per epoch (no host sync
per step). Each epoch's record holds ``scale`` and ``skipped_steps``; the fit's summary
``scaler``, which says when the run is unhealthy (``FLOOR``, ``SKIPPED_SHARE``): a note beside
the run's results, and a criterion of ``make compare``.
"""
from __future__ import annotations

FLOOR = 1.0  # a scale under 1 shrinks the loss: fp16 overflows unscaled
SKIPPED_SHARE, SETTLING = 0.05, 20  # past 5% of the steps skipped (20 allowed while it settles)


class ScalerWatch:
    """Counts one fit's skipped steps (its scaler's scale fell) on the device."""

    def __init__(self):
        self.before = None
        self.skipped = None  # a device tensor: this epoch's skipped steps
        self.total = 0

    def before_step(self, scaler) -> None:
        scale = getattr(scaler, "_scale", None) if scaler.is_enabled() else None
        self.before = None if scale is None else scale.clone()

    def after_step(self, scaler) -> None:
        if self.before is None:
            return
        fell = (scaler._scale < self.before).int()
        self.skipped = fell if self.skipped is None else self.skipped + fell

    def epoch_record(self, scaler) -> dict:
        """``scale`` and ``skipped_steps`` of the epoch that ends (one host sync); {} without a
        scaler."""
        if not scaler.is_enabled() or getattr(scaler, "_scale", None) is None:
            return {}
        skipped = int(self.skipped.item()) if self.skipped is not None else 0
        self.total, self.skipped = self.total + skipped, None
        return {"scale": float(scaler.get_scale()), "skipped_steps": skipped}


def summary(history: list, steps: int) -> dict:
    """The run's scaler from its epochs' records: the last and lowest scale, the steps skipped and
    their share, and whether that is healthy (with why); {} when no epoch had a scaler."""
    scaled = [h for h in history if "scale" in h]
    if not scaled:
        return {}
    skipped = sum(h["skipped_steps"] for h in scaled)
    lowest = min(h["scale"] for h in scaled)
    share = skipped / max(steps, 1)
    why = []
    if lowest < FLOOR:
        why.append(f"its scale fell to {lowest:.3g} (under {FLOOR:g}: fp16 overflows even unscaled)")
    if skipped > max(SETTLING, SKIPPED_SHARE * steps):
        why.append(f"{skipped} of {steps} steps skipped ({share:.0%}, past {SKIPPED_SHARE:.0%})")
    return {"scale": scaled[-1]["scale"], "lowest_scale": lowest, "skipped_steps": skipped,
            "skipped_share": round(share, 4), "healthy": not why,
            "why": "; ".join(why) + ": fp16's range does not hold these gradients; train in fp32 (or bf16 on "
                   "compute capability 8.0+)" if why else "a few skips while the scale settled"}

