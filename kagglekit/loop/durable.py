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

import io
import json
import os
import sys
import time
import warnings

import torch

from ..machine import precision as precision_mod
from ..parallel import ranks
from ..parallel.forked import RestartRequest
from ..state.checkpoint import CheckpointManager, restore, snapshot
from . import guards
from .fitstate import LoopState, Parts

OOM_ENV = "KAGGLEKIT_OOM"  # a restart's smaller batches: {"split": n, "events": [...]}


class RolledBack(Exception):
    """The loop state was replaced by an earlier one: go on from where it now stands."""


# Before the first save its time is unknown; a stop at the time budget must still leave room for
# the save it ends with: the whole state fsynced at a slow disk's pace, and never under a floor.
FIRST_SAVE_FLOOR_S = 0.5
SLOW_DISK_BYTES_PER_S = 100e6


class Durable:
    def __init__(self, parts: Parts, checkpoints: CheckpointManager | None, *,
                 config: dict | None = None, early_stopping=None, save_frozen: bool = True):
        self.parts, self.checkpoints = parts, checkpoints
        self.save_frozen = save_frozen
        self.config = config or {}
        self.early_stopping = early_stopping
        self.resumed_from = self.last_checkpoint = self.extended = None
        self.last_save = time.monotonic()
        self.save_s = 0.0  # duration of the last save
        self._first_save_estimate = None
        self.guard = guards.NonFiniteGuard()
        self.initial = None  # the start as bytes, where automatic fp16 may roll back to it

    @property
    def state(self) -> LoopState:
        return self.parts.state

    def snapshot(self) -> dict:
        extra = {"loop": self.state.to_dict()}
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

    def save_for_restart(self, event: dict, split: int) -> RestartRequest:
        """A DDP rank out of memory: record the smaller batches, save the state its step
        started from under the rank's own name (rank 0 may be saving that step right now),
        and return the restart that carries on from there. No collective: the other ranks may
        be stuck in one."""
        st = self.state
        st.split = max(st.split, split)
        st.oom_events.append(event)
        saved = None
        if self.checkpoints is not None:
            metrics = st.history[-1] if st.history else {}
            saved = self.checkpoints.save(self.snapshot(), step=st.step, epoch=st.epoch,
                                          metrics=metrics, config=self.config,
                                          tag=f"r{event['rank']}")
        where = f"saved {saved.name}" if saved else "no checkpoints: the fit starts over"
        reason = (f"rank {event['rank']} ran out of CUDA memory at step {event['step']} ({where}); "
                  f"every rank goes on with per-GPU batches of {event['per_gpu_batch']} "
                  f"(split x{st.split}, same effective batch)")
        return RestartRequest(reason, {OOM_ENV: json.dumps({"split": st.split,
                                                            "events": st.oom_events})})

    def after_restart(self) -> None:
        """After a restart for memory: the smaller batches and their record, where the state
        resumed from does not carry them (a fit without checkpoints)."""
        plan = os.environ.get(OOM_ENV)
        if not plan:
            return
        plan, st = json.loads(plan), self.state
        st.split = max(st.split, int(plan["split"]))
        st.oom_events += [e for e in plan["events"] if e not in st.oom_events]

    # ---- resuming --------------------------------------------------------
    def resume(self, loader=None, enabled: bool = True, length=None, start=None) -> bool:
        """Restore the newest usable checkpoint of this run's identity; True when nothing is
        left to train. ``enabled=False`` deletes this identity's checkpoints.

        ``length`` (``schedule.Length``): what this fit trains to. A finished run asked for
        more trains on (its schedule replayed by ``start``, a ``schedule.Start``); asked for
        fewer, it says so and keeps its weights. Without a length, a final checkpoint ends it.
        """
        try:
            if self.checkpoints is None:
                return False
            self.checkpoints.bind(self.checkpoints.identity_for(self.config, self.parts.model,
                                                                loader))
            if not enabled:  # start over: stale higher steps would win later resumes
                if ranks.is_main():
                    self.checkpoints.clear()
                return False
            found = self.agreed_latest()
            if found is None:
                self.say_why_not_resumed()
                return False
            where, state = found
            self.load(state)
            self.resumed_from = self.last_checkpoint = str(where.path)
            self._say(f"resumed from {where.path} (step {self.state.step}, epoch "
                      f"{self.state.epoch}, batch {self.state.batches_done})")
            if length is None:
                return bool(where.meta.get("final"))
            return self._to_length(bool(where.meta.get("final")), length, start)
        finally:
            self.guard = guards.NonFiniteGuard(self.state.step)
            self.keep_initial_state()

    def agreed_latest(self):
        """The newest usable checkpoint, the same on every rank: rank 0 picks it, the others
        load what rank 0 picked. Each looking for itself could find another one while the folder
        changes (a save landing between two ranks' reads), and ranks at different steps wait
        for each other's collectives forever."""
        # Loaded onto the CPU: ``load`` moves each tensor where its object lives, and the RNG
        # states must be CPU tensors (a GPU resume crashed in torch.set_rng_state otherwise).
        found = self.checkpoints.load_latest(map_location="cpu") if ranks.is_main() else None
        chosen = ranks.from_main(str(found[0].path) if found else None, self.parts.device)
        if ranks.is_main() or chosen is None:
            return found
        return self.checkpoints.load_file(chosen, map_location="cpu")

    def _to_length(self, final: bool, length, start) -> bool:
        """Whether the resumed state already covers ``length``; else ready it to train on."""
        st, saved = self.state, self.state.length
        if final and st.stopped in ("early_stopping", "requested"):
            self._say(f"this run stopped by {st.stopped} at epoch {st.epoch}; a longer run would "
                      "stop there too: nothing to train (force_retrain=True starts over)")
            return True
        if length.reached_by(st.step, st.epoch):
            if st.step > length.steps:
                self._say(f"this run already trained {st.step} steps (epoch {st.epoch}); "
                          f"{length.describe()} asks for fewer: keeping the longer run's weights, "
                          "nothing trained")
            return True
        if saved != length.as_dict():
            from .schedule import extension_note
            what = start.extend(self.parts.scheduler, self.parts.optimizer) if start else {}
            self.extended = extension_note(saved, length, what)
            self._say(self.extended)
        st.length, st.stopped = length.as_dict(), ""
        return False

    def _say(self, text: str) -> None:
        if ranks.is_main():
            print(f"kagglekit: {text}", flush=True)

    def load(self, state: dict) -> None:
        """Put ``state`` (a checkpoint's) into the live objects and the loop."""
        if state["loop"].get("precision") == "fp32" and self.parts.amp.name == "fp16":
            self.fall_back_to_fp32()  # an earlier session gave fp16 up for this run
        p = self.parts
        restore(state, p.model, p.optimizer, p.scheduler, p.amp.scaler, device=p.device)
        p.state = LoopState.from_dict(state["loop"])
        if self.early_stopping is not None and "early_stopping" in state:
            self.early_stopping.load_state_dict(state["early_stopping"])

    def say_why_not_resumed(self) -> None:
        """One warning naming what differs from the newest checkpoint of another run."""
        others = self.checkpoints.others() if ranks.is_main() else []
        if not others:
            return
        other = others[0]
        why = self.checkpoints.identity.differences(other.meta.get("identity") or
                                                    {"config": other.meta.get("config", {})})
        warnings.warn(f"not resuming {other.path}: it was trained with "
                      f"{'; '.join(why) or 'another identity'}. Training from scratch in "
                      f"{self.checkpoints.directory} (that run's checkpoints are kept).",
                      stacklevel=5)

    # ---- non-finite losses -------------------------------------------------
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
