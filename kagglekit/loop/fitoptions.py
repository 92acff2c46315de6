"""``fit``'s options, in three groups: speed, durability, watching.

Pass a group (``fit(..., speed=Speed(precision="bf16", accumulate=4))``) or any of
its fields by name (``fit(..., accumulate=4)``): each name belongs to exactly one
group. What is not given comes from the run context ``fit(..., run=run)`` receives
(precision, resume, time budget, config, the sandbox's work cap), else from the
defaults below.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Callable

from ..machine.budget import Budget


@dataclass(frozen=True)
class Speed:
    """How fast: precision, compilation, CUDA graphs, accumulation, clipping, OOM back-off.

    precision: "auto" (per card: bf16 >= 8.0, fp16 + GradScaler on 7.x, fp32 on CPU),
        "fp32", "fp16", "bf16", or a ``Precision``; None: the run's ``precision``.
    compile: "off", "auto" (torch.compile, eager on failure), "strict", or a dict of
        torch.compile options (auto mode).
    cuda_graphs: "off", "auto" or "strict": capture the training forward and backward
        at the first step and replay them (for small, launch-bound models); steps whose
        shapes change run eagerly. Warm-up runs the first batch 3 extra times (11 under
        DDP) without updating weights; it does draw from the CUDA RNG.
    cudnn_benchmark: let cuDNN time its kernels for the fit's shapes and keep the fastest
        (on for fixed shapes; set back to what it was when the fit ends).
    accumulate: micro-batches per optimizer step (no DDP sync between them).
    clip_grad_norm: max global gradient norm (of the unscaled gradients).
    oom_backoff / min_batch: on CUDA out-of-memory retry the step with each batch cut in
        two (same effective batch) down to ``min_batch`` per GPU; under DDP the ranks
        agree and gradients are all-reduced after backward (pass False for DDP's overlap).
    """
    precision: object = None
    compile: object = "off"
    cuda_graphs: str = "off"
    cudnn_benchmark: bool = True
    accumulate: int = 1
    clip_grad_norm: float | None = None
    oom_backoff: bool = True
    min_batch: int = 1


@dataclass(frozen=True)
class Durability:
    """What survives a kill: checkpoints, resume, the time budget.

    checkpoints: a CheckpointManager, a name (the run's ``checkpoints/<name>``), or
        None (no saving, no resuming).
    save_every_min: minutes between mid-epoch saves (0: every step; None: epoch ends).
    resume: continue from the newest checkpoint of this run's identity (working dir or
        inputs); False deletes this identity's checkpoints and starts over. None: the
        run's ``force_retrain`` decides.
    time_budget: seconds or a Budget; None: the run's (``time_budget_s``), else the Kaggle
        session limit on Kaggle and none elsewhere. The loop stops with a checkpoint first.
    config: stored in every checkpoint's sidecar and part of the run's identity
        (None: the run's config).
    """
    checkpoints: object = None
    save_every_min: float | None = 20.0
    resume: bool | None = None
    time_budget: object = None
    config: dict | None = None

    def resolved(self, run) -> "Durability":
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
    """Who watches: hooks, early stopping, limits, progress, profiling.

    on_step_end / on_epoch_end: ``hook(state: LoopState)``; may call
        ``state.request_stop()`` or ``state.request_checkpoint()``.
    max_steps / limit_batches: cap optimizer steps in total / batches per epoch.
    profile_every: time the phases of one step in this many (data wait, copy, compute,
        optimizer): CUDA events on GPU (no host sync), wall clock on CPU.
    monitor_gpu: sample GPU utilisation and memory through NVML (rank 0, on GPU).
    """
    early_stopping: object = None
    on_step_end: Callable | None = None
    on_epoch_end: Callable | None = None
    max_steps: int | None = None
    limit_batches: int | None = None
    progress: bool = True
    profile_every: int = 25
    monitor_gpu: bool = True


GROUPS = (Speed, Durability, Watch)
UNSET = object()  # a keyword fit() was not given (None is a value some options take)


def capped(watch: Watch, cap: int | None) -> Watch:
    """``watch`` with max_steps and limit_batches within the sandbox's work cap."""
    if cap is None:
        return watch
    def smaller(value):
        return cap if value is None else min(value, cap)
    return replace(watch, max_steps=smaller(watch.max_steps), limit_batches=smaller(watch.limit_batches))


def group(speed: Speed | None, durability: Durability | None, watch: Watch | None,
          options: dict) -> tuple[Speed, Durability, Watch]:
    """The three groups, with ``options`` (flat names; UNSET ones ignored) filed into their
    own group."""
    options = {k: v for k, v in options.items() if v is not UNSET}
    given = [speed or Speed(), durability or Durability(), watch or Watch()]
    homes = {f.name: i for i, cls in enumerate(GROUPS) for f in fields(cls)}
    unknown = sorted(set(options) - set(homes))
    if unknown:
        raise TypeError(f"fit() got unknown option(s) {unknown}; options are the fields of "
                        + "; ".join(f"{c.__name__}({', '.join(f.name for f in fields(c))})"
                                    for c in GROUPS))
    for i in range(3):
        mine = {k: v for k, v in options.items() if homes[k] == i}
        if mine:
            given[i] = replace(given[i], **mine)
    speed, durability, watch = given
    if speed.accumulate < 1:
        raise ValueError(f"accumulate={speed.accumulate} must be >= 1")
    if speed.compile != "off" and speed.cuda_graphs != "off":
        raise ValueError("compile and cuda_graphs are two ways to the same end: pass "
                         "compile={'mode': 'reduce-overhead'} or cuda_graphs='auto', not both")
    return speed, durability, watch
