"""The restart after a DDP rank ran out of CUDA memory: save where it stood, carry on smaller.

A rank out of memory cannot rejoin the others' collectives; it saves the state its step started
from under its own name and asks every rank to restart with smaller per-GPU batches (the same
effective batch): ``launch`` restarts them, and each reads the smaller batches back.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable

from ..parallel.forked import RestartRequest
from ..state.checkpoint import CheckpointManager
from .fitstate import Parts

OOM_ENV = "KAGGLEKIT_OOM"  # a restart's smaller batches: {"split": n, "events": [...]}


class Restarts:
    """The restart after running out of memory (``Durable`` holds one)."""

    def __init__(self, parts: Parts, checkpoints: CheckpointManager | None, config: dict,
                 snapshot: Callable[[], dict]):
        self.parts, self.checkpoints, self.config, self.snapshot = parts, checkpoints, config, snapshot

    def save_for_restart(self, event: dict, split: int) -> RestartRequest:
        """A DDP rank out of memory: record the smaller batches, save the state its step
        started from under the rank's own name (rank 0 may be saving that step right now),
        and return the restart that carries on from there. No collective: the other ranks may
        be stuck in one."""
        st = self.parts.state
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
        plan, st = json.loads(plan), self.parts.state
        st.split = max(st.split, int(plan["split"]))
        st.oom_events += [e for e in plan["events"] if e not in st.oom_events]
