"""``fit``'s options, in the groups its parts read: speed, durability, watching.

What the run decides is not a fit's option: the device, the precision decided for the card,
resume or ``force_retrain``, the session's deadline and the sandbox's work cap come from the run
context (``Alone`` outside a notebook's run); the config and what checkpoints hold come with the
checkpoints (a unit's, or ``run.checkpoints``). ``Speed`` and ``Monitor`` group the options
that only tune how a fit runs. Why a fit stopped is a ``Stop``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

import torch

from ..machine.budget import Budget
from ..machine.precision import Precision
from ..parallel import ranks
from ..state.checkpoint import CheckpointManager


class RunOfAFit(Protocol):
    """What ``fit`` reads from a run: ``Run`` (``kk.start``'s) and ``Alone`` implement it, and the
    type checker holds both to it (``make lint``)."""

    @property
    def place(self) -> ranks.Place: ...  # this process's rank, world and device
    @property
    def precision(self) -> Precision | str: ...  # decided for the card, or a precision's name
    @property
    def config(self) -> dict: ...  # the checkpoints' config when they carry none
    @property
    def resume(self) -> bool: ...  # False: force_retrain
    @property
    def work_cap(self) -> int | None: ...  # the sandbox's cap on steps and batches
    @property
    def session(self) -> str: ...  # this kernel run, in the fit's record

    def budget(self) -> Budget: ...  # the session's deadline

    def checkpoints(self, name: str = "model") -> CheckpointManager: ...  # the run's


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


@dataclass(frozen=True)
class Speed:
    """How a fit goes fast, each default the kit's choice: ``fit(..., speed=Speed(...))``.

    precision: "auto" (bf16 on compute capability >= 8.0, fp16 + GradScaler on 7.x, fp32 on
        CPU), "fp32", "fp16", "bf16" or a ``Precision``; None: the run's (decided at kk.start).
    compile: "off", "auto" (torch.compile, eager on failure), "strict", or torch.compile's options.
    cuda_graphs: "off", "auto" or "strict": capture the training forward and backward at the first
        step and replay them (small, launch-bound models); steps of another shape run eagerly.
    cudnn_benchmark: cuDNN times its kernels for the fit's shapes (set back afterwards).
    oom_backoff / min_batch: on CUDA out-of-memory cut each batch in two (same effective batch,
        the same gradient) down to ``min_batch`` per GPU (see ``step``).
    """
    precision: object = None
    compile: object = "off"
    cuda_graphs: str = "off"
    cudnn_benchmark: bool = True
    oom_backoff: bool = True
    min_batch: int = 1

    def __post_init__(self):
        if self.compile != "off" and self.cuda_graphs != "off":
            raise ValueError("compile and cuda_graphs are two ways to the same end: pass "
                             "compile={'mode': 'reduce-overhead'} or cuda_graphs='auto', not both")


@dataclass(frozen=True)
class Monitor:
    """What a fit measures: the phases of one step in ``profile_every`` (why the GPU waits; 0:
    none), and the GPUs through NVML (rank 0, on GPU) when ``gpu``. ``fit(monitor=False)``:
    neither."""
    profile_every: int = 25
    gpu: bool = True


@dataclass(frozen=True)
class Durability:
    checkpoints: CheckpointManager | None
    save_every_min: float | None
    resume: bool
    time_budget: Budget
    config: dict
    save_frozen: bool = True  # False: checkpoints without the frozen parameters

    @classmethod
    def of(cls, checkpoints, run: RunOfAFit) -> Durability:
        """What the run decides (resume, the deadline) and the checkpoints carry (the config,
        what they hold), for one fit."""
        if isinstance(checkpoints, str):
            checkpoints = run.checkpoints(checkpoints)
        own = getattr(checkpoints, "config", None)
        every = getattr(checkpoints, "save_every_min", 20.0)  # when to save is the checkpoints' (a fit's, a run's)
        return cls(checkpoints, every, run.resume, Budget.resolve(run.budget()),
                   own if own is not None else run.config, getattr(checkpoints, "save_frozen", True))

    @property
    def unit(self) -> str:
        """The key of the unit of work the fit belongs to ("" outside any)."""
        return getattr(self.checkpoints, "unit", "") or ""


@dataclass(frozen=True)
class Watch:
    early_stopping: object
    on_step_end: Callable | None
    on_epoch_end: Callable | None
    max_steps: int | None
    limit_batches: int | None
    progress: bool
    monitor: Monitor


def monitor_of(monitor: bool | Monitor) -> Monitor:
    return monitor if isinstance(monitor, Monitor) else Monitor(gpu=bool(monitor)) if monitor \
        else Monitor(profile_every=0, gpu=False)


@dataclass(frozen=True)
class Alone:
    """The run context of a fit outside a notebook's run (a test, a benchmark, a script):
    ``fit(..., run=Alone(device="cpu", precision="fp16", resume=False, time_budget=60))``.
    ``run=None`` is ``Alone()``: this process's device, "auto" precision, resume, no deadline
    (Kaggle's session limit on Kaggle)."""
    device: str | torch.device | None = None
    precision: str = "auto"  # decided for the device at each fit (a Run decides it at kk.start)
    resume: bool = True
    time_budget: object = None
    config: dict = field(default_factory=dict)
    work_cap: int | None = None
    session: str = ""

    @cached_property  # asked once per fit (a frozen dataclass keeps it in its __dict__)
    def place(self) -> ranks.Place:
        return ranks.Place(device=torch.device(self.device) if self.device is not None
                           else ranks.default_device())

    def budget(self) -> Budget:
        return Budget.resolve(self.time_budget)

    def checkpoints(self, name: str = "model") -> CheckpointManager:
        raise ValueError(f"checkpoints={name!r} names a fit of the run: pass run=run (kk.start's), "
                         "or a CheckpointManager")


if TYPE_CHECKING:  # the type checker holds Alone to what fit reads (Run: run/context.py)
    _ALONE_IS_A_RUN_OF_A_FIT: type[RunOfAFit] = Alone


def capped(watch: Watch, cap: int | None) -> Watch:
    """``watch`` with max_steps and limit_batches within the sandbox's work cap."""
    if cap is None:
        return watch

    def smaller(value):
        return cap if value is None else min(value, cap)
    return replace(watch, max_steps=smaller(watch.max_steps), limit_batches=smaller(watch.limit_batches))
