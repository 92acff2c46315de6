"""A non-finite loss: stop with advice, or under automatic fp16 roll back and go on in fp32.

Every rank checks the loss before a state becomes a checkpoint; under DDP they decide together.
Automatic fp16 (a T4) that meets a NaN/inf gives fp16 up for this run: the last good state (a
checkpoint, or the start kept in host memory) is reloaded and training goes on in fp32.
"""
from __future__ import annotations

import io
import sys

import torch

from ..machine import precision as precision_mod
from ..parallel import ranks
from . import guards


class RolledBack(Exception):
    """The loop state was replaced by an earlier one: go on from where it now stands."""


class Fallback:
    """``Durable``'s part for non-finite losses (it holds ``parts``, ``guard``, ``initial``)."""

    def keep_initial_state(self) -> None:
        """Under automatic fp16 a non-finite loss rolls back to the last good state;
        before the first checkpoint that is the start (kept as bytes in host memory)."""
        if self.parts.amp.name == "fp16" and self.parts.amp.auto:
            buf = io.BytesIO()
            torch.save(self.snapshot(), buf)
            self.initial = buf.getvalue()

    def check_finite(self, agree: bool = False, also: list[bool] = ()) -> list[bool]:
        """Act on a NaN/inf loss seen since the last check (one host sync): raise
        NonFiniteLoss, or under automatic fp16 roll back to fp32 (raises RolledBack). Under
        DDP (``agree``) the ranks decide together, in the one collective that also agrees on
        the loop's ``also`` flags, returned agreed."""
        found = self.guard.found(self.state.summed_loss(), self.state.step)
        flags = [found is not None, *also]
        if agree:
            flags = ranks.agree(flags, self.parts.device)
        if not flags[0]:
            return flags[1:]
        first, step, loss = found or (self.state.step, self.state.step, float("nan"))  # another rank's
        chosen = self.parts.amp
        if not (chosen.name == "fp16" and chosen.auto):
            raise guards.NonFiniteLoss(guards.advice((first, step), loss, chosen.name,
                                                     self.last_checkpoint))
        self.roll_back_to_fp32(first, step, loss)

    def roll_back_to_fp32(self, first: int, step: int, loss: float) -> None:
        found = self.agreed_latest() if self.checkpoints else None
        state = found[1] if found else torch.load(io.BytesIO(self.initial), weights_only=True,
                                                  map_location="cpu")
        self.fall_back_to_fp32()
        events = self.state.precision_events
        self.load(state)
        good = self.state.step
        self.state.precision = "fp32"
        self.state.precision_events = events + [{"steps": [first, step], "loss": loss, "from": "fp16",
                                                 "to": "fp32", "resumed_at_step": good}]
        self.guard = guards.NonFiniteGuard(good)
        if ranks.is_main():
            print(f"kagglekit: the loss became {loss} between steps {first} and {step} under fp16; "
                  f"continuing in fp32 from the last good state (step {good})", file=sys.stderr,
                  flush=True)
        raise RolledBack

    def fall_back_to_fp32(self) -> None:
        self.parts.amp = precision_mod.Amp(precision_mod.Precision("fp32", self.parts.device.type))
