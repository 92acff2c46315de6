"""A non-finite loss: stop with advice, or under automatic fp16 roll back and go on in fp32.

Every rank checks the loss before a state becomes a checkpoint; under DDP they decide together.
Automatic fp16 (a T4) that meets a NaN/inf gives fp16 up for this run: the last good state (a
checkpoint, or the start kept in host memory) is reloaded and training goes on in fp32.
"""
from __future__ import annotations

import io
import sys
from collections.abc import Callable

import torch

from ..parallel import ranks
from . import guards
from .fitstate import Parts
from .resuming import Resumer


class RolledBack(Exception):
    """The loop state was replaced by an earlier one: go on from where it now stands."""


class Fallback:
    """Acts on a non-finite loss (``Durable`` holds one): advice, or the fp16 roll-back through
    the resumer that found the last good state. Whether a rank saw one is agreed by the caller."""

    def __init__(self, resumer: Resumer, snapshot: Callable[[], dict]):
        self.resumer, self.snapshot = resumer, snapshot
        self.guard = guards.NonFiniteGuard()
        self.initial: bytes | None = None  # the start as bytes, where automatic fp16 may roll back to it

    @property
    def parts(self) -> Parts:
        return self.resumer.parts

    def restart_guard(self) -> None:
        """Watch the loss from the step the fit now stands at; keep that state for a roll-back."""
        self.guard = guards.NonFiniteGuard(self.parts.state.step)
        self.keep_initial_state()

    def keep_initial_state(self) -> None:
        """Under automatic fp16 a non-finite loss rolls back to the last good state;
        before the first checkpoint that is the start (kept as bytes in host memory)."""
        if self.parts.amp.name == "fp16" and self.parts.amp.auto:
            buf = io.BytesIO()
            torch.save(self.snapshot(), buf)
            self.initial = buf.getvalue()

    def seen(self) -> tuple | None:
        """A NaN/inf loss since the last check, as ``(first step, step, loss)``, else None (one
        host sync)."""
        state = self.parts.state
        return self.guard.found(state.summed_loss(), state.step)

    def act(self, found: tuple | None, last_checkpoint: str | None) -> None:
        """A non-finite loss, on this rank (``found``) or another (None): raise NonFiniteLoss, or
        under automatic fp16 roll back to fp32 (raises RolledBack)."""
        step = self.parts.state.step
        first, step, loss = found or (step, step, float("nan"))  # another rank's
        chosen = self.parts.amp
        if not (chosen.name == "fp16" and chosen.auto):
            raise guards.NonFiniteLoss(guards.advice((first, step), loss, chosen.name, last_checkpoint))
        self.roll_back_to_fp32(first, step, loss)

    def roll_back_to_fp32(self, first: int, step: int, loss: float) -> None:
        found = self.resumer.agreed_latest() if self.resumer.checkpoints else None
        if found:
            state = found[1]
        else:
            assert self.initial is not None, "automatic fp16 keeps its start before the first step"
            state = torch.load(io.BytesIO(self.initial), weights_only=True, map_location="cpu")
        self.parts.fall_back_to_fp32()
        events = self.parts.state.precision_events
        self.resumer.load(state)
        st = self.parts.state
        good = st.step
        st.precision = "fp32"
        st.precision_events = events + [{"steps": [first, step], "loss": loss, "from": "fp16",
                                         "to": "fp32", "resumed_at_step": good}]
        self.guard = guards.NonFiniteGuard(good)
        if ranks.is_main():
            print(f"kagglekit: the loss became {loss} between steps {first} and {step} under fp16; "
                  f"continuing in fp32 from the last good state (step {good})", file=sys.stderr,
                  flush=True)
        raise RolledBack
