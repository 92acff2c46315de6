"""Durability for any training loop: save, resume, and survive a non-finite loss.

``fit`` uses it; a hand-written loop gets the same guarantees with a few calls::

    parts = Parts(model, optimizer, scheduler, kk.precision.Amp(run.precision), device)
    keeper = Durable(parts, run.checkpoints("mine"), config=run.config)
    if not keeper.resume(loader):          # False: nothing finished to skip
        for batch in loader:
            ...; parts.state.step += 1
            if keeper.due(save_every_min=20):
                keeper.save()
        keeper.save(final=True)

Checkpoints bind to the run's identity (config, data, model), only rank 0 writes,
and every rank checks the loss is finite before a state becomes a checkpoint.
"""
from __future__ import annotations

import time

from ..parallel import ranks
from ..parallel.forked import RestartRequest
from ..state.checkpoint import CheckpointManager, snapshot
from .fallback import Fallback, RolledBack  # noqa: F401 (kk.durable.RolledBack)
from .fitstate import LoopState, Parts
from .restarts import OOM_ENV, Restarts  # noqa: F401 (kk.durable.OOM_ENV)
from .resuming import Resumer

# Before the first save its time is unknown; a stop at the time budget must still leave room for
# the save it ends with: the whole state fsynced at a slow disk's pace, and never under a floor.
FIRST_SAVE_FLOOR_S = 0.5
SLOW_DISK_BYTES_PER_S = 100e6


class Durable:
    """Checkpoints of one training loop: when to save, and saving (rank 0 writes, every rank
    checks the state is finite). It holds its parts: the resumer (``resuming``), the non-finite
    loss's fallback (``fallback``) and the restart after running out of memory (``restarts``)."""

    def __init__(self, parts: Parts, checkpoints: CheckpointManager | None, *,
                 config: dict | None = None, early_stopping=None, save_frozen: bool = True):
        self.parts, self.checkpoints = parts, checkpoints
        self.save_frozen = save_frozen
        self.config = config or {}
        self.early_stopping = early_stopping
        self.resumer = Resumer(parts, checkpoints, self.config, early_stopping)
        self.fallback = Fallback(self.resumer, self.snapshot)
        self.restarts = Restarts(parts, checkpoints, self.config, self.snapshot)
        self.last_checkpoint: str | None = None
        self.last_save = time.monotonic()
        self.save_s = 0.0  # duration of the last save
        self._first_save_estimate: float | None = None

    @property
    def state(self) -> LoopState:
        return self.parts.state

    @property
    def resumed_from(self) -> str | None:
        return self.resumer.resumed_from

    @property
    def extended(self) -> str | None:
        return self.resumer.extended

    def resume(self, loader=None, enabled: bool = True, length=None, start=None) -> bool:
        """``Resumer.resume``: True when nothing is left to train; the loss watched from there."""
        try:
            finished = self.resumer.resume(loader, enabled, length, start)
            self.last_checkpoint = self.resumer.resumed_from or self.last_checkpoint
            return finished
        finally:
            self.fallback.restart_guard()

    def check_finite(self, agree: bool = False, also: list[bool] | tuple[bool, ...] = ()) -> list[bool]:
        """Act on a NaN/inf loss seen since the last check (``Fallback.act``). Under DDP
        (``agree``) the ranks decide together, in the one collective that also agrees on the
        loop's ``also`` flags, returned agreed."""
        found = self.fallback.seen()
        flags = [found is not None, *also]
        if agree:
            flags = ranks.agree(flags, self.parts.device)
        if flags[0]:
            self.fallback.act(found, self.last_checkpoint)
        return flags[1:]

    def save_for_restart(self, event: dict, split: int) -> RestartRequest:
        return self.restarts.save_for_restart(event, split)

    def after_restart(self) -> None:
        self.restarts.after_restart()

    def snapshot(self) -> dict:
        extra = {"loop": self.state.to_dict()}
        if self.parts.ema is not None:
            extra["ema"] = self.parts.ema.state_dict()
        if self.early_stopping is not None:
            extra["early_stopping"] = self.early_stopping.state_dict()
        p = self.parts
        return snapshot(p.model, p.optimizer, p.scheduler, p.amp.scaler, frozen=self.save_frozen,
                        device=p.device, **extra)

    # ---- saving ----------------------------------------------------------
    def due(self, save_every_min: float | None) -> bool:
        """Is a time-based save (or one a hook asked for) due?"""
        timed = save_every_min is not None and \
            time.monotonic() - self.last_save >= save_every_min * 60
        return timed or self.state.save_requested

    def expected_save_s(self) -> float:
        """How long the next save should take: the last one's time, or before any an estimate
        from the state's size (a slow disk), at least ``FIRST_SAVE_FLOOR_S``."""
        if self.save_s or self.checkpoints is None:
            return self.save_s
        if self._first_save_estimate is None:
            from ..state.space import state_bytes
            self._first_save_estimate = max(FIRST_SAVE_FLOOR_S, state_bytes(self.snapshot()) / SLOW_DISK_BYTES_PER_S)
        return self._first_save_estimate

    def save(self, final: bool = False) -> None:
        """Checkpoint the current state (rank 0 writes; every rank checks it is finite)."""
        self.state.save_requested = False
        self.last_save = time.monotonic()
        if self.checkpoints is None:
            return
        self.check_finite(agree=True)  # a NaN state never becomes a checkpoint
        if not ranks.is_main():
            return
        started = time.monotonic()
        metrics = self.state.history[-1] if self.state.history else {}
        path = self.checkpoints.save(self.snapshot(), step=self.state.step, epoch=self.state.epoch,
                                     metrics=metrics, config=self.config, final=final)
        self.last_checkpoint = str(path)
        self.save_s = time.monotonic() - started
