"""Resuming a fit: the newest usable checkpoint of its identity, agreed on by every rank.

A finished run asked for more trains on (its schedule replayed); asked for fewer it keeps its
weights; a run stopped for good (early stopping) stays stopped. Within a unit's folder a
checkpoint of another model is refused with the fix; elsewhere another identity's checkpoints
are named in a warning, never resumed.
"""
from __future__ import annotations

import warnings

from ..parallel import ranks
from ..state.checkpoint import CheckpointManager, restore
from .fitstate import LoopState, Parts


class UnitModelChanged(ValueError):
    """A unit's checkpoint folder holds a checkpoint of another model."""


class Resumer:
    """Finds, agrees on and loads the checkpoint a fit goes on from (``Durable`` holds one); it
    also reloads the last good state for the fp16 roll-back (``fallback``)."""

    def __init__(self, parts: Parts, checkpoints: CheckpointManager | None, config: dict, early_stopping=None):
        self.parts, self.checkpoints, self.config = parts, checkpoints, config
        self.early_stopping = early_stopping
        self.resumed_from: str | None = None
        self.extended: str | None = None

    @property
    def state(self) -> LoopState:
        return self.parts.state

    def resume(self, loader=None, enabled: bool = True, length=None, start=None) -> bool:
        """Restore the newest usable checkpoint of this run's identity; True when nothing is
        left to train. ``enabled=False`` deletes this identity's checkpoints.

        ``length`` (``schedule.Length``): what this fit trains to. A finished run asked for
        more trains on (its schedule replayed by ``start``, a ``schedule.Start``); asked for
        fewer, it says so and keeps its weights. Without a length, a final checkpoint ends it.
        """
        if self.checkpoints is None:
            return False
        self.checkpoints.bind(self.checkpoints.identity_for(self.config, self.parts.model, loader))
        if not enabled:  # start over: stale higher steps would win later resumes
            if ranks.is_main():
                self.checkpoints.clear()
            return False
        found = self.agreed_latest()
        if found is None:
            self.say_why_not_resumed()
            return False
        where, state = found
        self.refuse_another_model(where)
        self.load(state)
        self.resumed_from = str(where.path)
        self._say(f"resumed from {where.path} (step {self.state.step}, epoch "
                  f"{self.state.epoch}, batch {self.state.batches_done})")
        if length is None:
            return bool(where.meta.get("final"))
        return self._to_length(bool(where.meta.get("final")), length, start)

    def refuse_another_model(self, found) -> None:
        """A unit's folder is named by its config, data and code, not its model: a checkpoint
        there of another model means the model's class is not among the unit's ``code=``."""
        assert self.checkpoints is not None and self.checkpoints.identity is not None, "bound in resume"
        identity = self.checkpoints.identity
        conflict = identity.model_conflict(found.meta.get("identity") or {}) if identity.unit else ""
        if conflict:
            raise UnitModelChanged(
                f"{found.path} is a checkpoint of another model ({conflict}) under the same unit key "
                f"{identity.unit}: the unit's code= does not name the model's class. Add it (code=[MyModel, "
                "...]) so a new model gets a key of its own, or force_retrain=True to start over.")

    def agreed_latest(self):
        """The newest usable checkpoint, the same on every rank: rank 0 picks it, the others
        load what rank 0 picked. Each looking for itself could find another one while the folder
        changes (a save landing between two ranks' reads), and ranks at different steps wait
        for each other's collectives forever."""
        assert self.checkpoints is not None
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
        chosen = (state["loop"].get("precision_choice") or {}).get("chosen")
        if "fp32" in (state["loop"].get("precision"), chosen) and self.parts.amp.name != "fp32":
            self.parts.fall_back_to_fp32()  # an earlier session gave fp16 up, or measured fp32 faster
        p = self.parts
        restore(state, p.model, p.optimizer, p.scheduler, p.amp.scaler, device=p.device)
        p.state = LoopState.from_dict(state["loop"])
        if p.ema is not None and "ema" in state:  # a checkpoint of a fit without one: the average starts here
            p.ema.load_state_dict(state["ema"])
        if self.early_stopping is not None and "early_stopping" in state:
            self.early_stopping.load_state_dict(state["early_stopping"])

    def say_why_not_resumed(self) -> None:
        """One warning naming what differs from the newest checkpoint of another run."""
        assert self.checkpoints is not None
        others = self.checkpoints.others() if ranks.is_main() else []
        if not others:
            return
        other = others[0]
        assert self.checkpoints.identity is not None, "bound in resume"
        why = self.checkpoints.identity.differences(other.meta.get("identity") or
                                                    {"config": other.meta.get("config", {})})
        warnings.warn(f"not resuming {other.path}: it was trained with "
                      f"{'; '.join(why) or 'another identity'}. Training from scratch in "
                      f"{self.checkpoints.directory} (that run's checkpoints are kept).",
                      stacklevel=5)
