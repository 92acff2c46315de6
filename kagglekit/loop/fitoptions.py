"""``fit``'s options, filed into the groups its parts read: speed, durability, watching.

Options are passed to ``fit`` as keywords, documented there once; ``fit`` builds the three
groups from them (``from_keywords``). What a fit is not given comes from the run context it
receives (precision, resume, time budget, config, the sandbox's work cap: ``Durability.resolved``
and ``capped``), else from ``fit``'s defaults. Why a fit stopped is a ``Stop``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from enum import Enum

from ..machine.budget import Budget


class Stop(str, Enum):
    """Why a fit stopped (a str: metrics.json and older checkpoints hold the value)."""
    COMPLETED = "completed"
    MAX_STEPS = "max_steps"
    TIME_BUDGET = "time_budget"  # not finished: the next session resumes
    EARLY_STOPPING = "early_stopping"
    REQUESTED = "requested"  # a hook asked (state.request_stop())
    INTERRUPTED = "interrupted"  # the Stop button or SIGTERM: saved, then Interrupted raised
    ALREADY_COMPLETE = "already_complete"  # resumed a finished run: nothing trained

    def __str__(self) -> str:
        return self.value

    @property
    def ends_the_run(self) -> bool:
        """A longer run asked for later would stop here too (nothing to train on)."""
        return self in (Stop.EARLY_STOPPING, Stop.REQUESTED)


@dataclass(frozen=True)
class Speed:
    precision: object
    compile: object
    cuda_graphs: str
    cudnn_benchmark: bool
    accumulate: int
    clip_grad_norm: float | None
    oom_backoff: bool
    min_batch: int


@dataclass(frozen=True)
class Durability:
    checkpoints: object
    save_every_min: float | None
    resume: bool | None
    time_budget: object
    config: dict | None
    save_frozen: bool = True  # False: checkpoints without the frozen parameters

    def resolved(self, run) -> Durability:
        """Every None the run decides, decided (explicit values win)."""
        manager = self.checkpoints
        if isinstance(manager, str):
            if run is None:
                raise ValueError(f"checkpoints={manager!r} names a fit of the run: pass run=run "
                                 "(kk.start's), or a CheckpointManager")
            manager = run.checkpoints(manager)
        resume = self.resume if self.resume is not None else (run.resume if run else True)
        budget = self.time_budget if self.time_budget is not None else (
            run.budget() if run else None)
        config = self.config if self.config is not None else (run.config if run else {})
        return replace(self, checkpoints=manager, resume=resume,
                       time_budget=Budget.resolve(budget), config=config)


@dataclass(frozen=True)
class Watch:
    early_stopping: object
    on_step_end: Callable | None
    on_epoch_end: Callable | None
    max_steps: int | None
    limit_batches: int | None
    progress: bool
    profile_every: int
    monitor_gpu: bool


def from_keywords(options: dict) -> tuple[Speed, Durability, Watch]:
    """The groups, from ``fit``'s keyword arguments (each name in exactly one group)."""
    speed, durability, watch = (cls(**{f.name: options[f.name] for f in fields(cls)})
                                for cls in (Speed, Durability, Watch))
    if speed.accumulate < 1:
        raise ValueError(f"accumulate={speed.accumulate} must be >= 1")
    if speed.compile != "off" and speed.cuda_graphs != "off":
        raise ValueError("compile and cuda_graphs are two ways to the same end: pass "
                         "compile={'mode': 'reduce-overhead'} or cuda_graphs='auto', not both")
    return speed, durability, watch


def capped(watch: Watch, cap: int | None) -> Watch:
    """``watch`` with max_steps and limit_batches within the sandbox's work cap."""
    if cap is None:
        return watch

    def smaller(value):
        return cap if value is None else min(value, cap)
    return replace(watch, max_steps=smaller(watch.max_steps), limit_batches=smaller(watch.limit_batches))
