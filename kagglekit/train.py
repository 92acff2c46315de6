"""The fit loop: mixed precision, accumulation, checkpoints, budgets, resume.

One function, ``fit``, with explicit keyword arguments. It reads top to bottom:
resume -> for each epoch: position the loader, run optimizer steps, maybe save
or stop -> close the epoch (evaluate, schedule, early-stop, save) -> final save.
"""
from __future__ import annotations

import math
import sys
import time
import warnings
from typing import Callable

import torch
import torch.distributed as dist

import io

from . import accel, cudagraph, data, guards, monitor, precision as precision_mod, step as step_mod
from .budget import Budget
from .checkpoint import CheckpointManager, restore, snapshot
from .fitstate import EarlyStopping, FitResult, LoopState  # noqa: F401 (re-exported)
from .progress import bar as progress_bar

LossFn = Callable[[torch.nn.Module, object], torch.Tensor]


def supervised(criterion: Callable) -> LossFn:
    """``loss_fn`` for (inputs, targets) batches: ``criterion(model(x), y)``."""
    def loss_fn(model, batch):
        x, y = batch
        return criterion(model(x), y)
    return loss_fn


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


AGREE_EVERY = 16  # steps between the ranks' joint stop/save decisions under DDP


def _agree(flags: list[bool], device: torch.device) -> list[bool]:
    """Each flag true on every rank if it is true on any (one all-reduce for all).

    Ranks must take the same decision to stop or save, or a collective hangs.
    """
    if not _distributed():
        return flags
    t = torch.tensor([1.0 if f else 0.0 for f in flags], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [bool(v) for v in t.tolist()]


def _default_device() -> torch.device:
    """The launch context's device; else cuda:LOCAL_RANK when there is a GPU."""
    from .gpus import inventory
    from .launcher import context
    ctx = context()
    if ctx.strategy != "single" or ctx.device.type == "cuda":
        return ctx.device
    if not inventory():
        return torch.device("cpu")
    return torch.device(f"cuda:{int(__import__('os').environ.get('LOCAL_RANK', 0))}")


def _wrap(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """DDP inside a process group; DataParallel under launch(strategy="dp")."""
    from .launcher import context
    ddp = torch.nn.parallel.DistributedDataParallel
    if _distributed() and not isinstance(model, ddp):
        return ddp(model, device_ids=[device.index] if device.type == "cuda" else None)
    if context().strategy == "dp" and device.type == "cuda" and torch.cuda.device_count() > 1:
        return torch.nn.DataParallel(model)
    return model


def resolve_precision(precision, device: torch.device) -> precision_mod.Precision:
    if isinstance(precision, precision_mod.Precision):
        return precision
    if device.type != "cuda":
        return precision_mod.choose(precision, None)
    cap = torch.cuda.get_device_capability(device)
    return precision_mod.choose(precision, cap, torch.cuda.get_device_name(device))


def evaluate_loss(model, loader, loss_fn: LossFn, device, limit_batches=None) -> dict:
    """Mean loss over ``loader`` (summed over every rank under DDP)."""
    total = torch.zeros(2, dtype=torch.float64, device=device)
    for i, batch in enumerate(loader):
        if limit_batches is not None and i >= limit_batches:
            break
        batch = data.to_device(batch, device)
        size = len(batch[0]) if isinstance(batch, (list, tuple)) else 1
        total += torch.stack([loss_fn(model, batch).detach().double() * size,
                              torch.tensor(float(size), dtype=torch.float64, device=device)])
    if _distributed():
        dist.all_reduce(total)
    return {"val_loss": (total[0] / total[1].clamp(min=1)).item()}


def _epoch_batches(loader, limit_batches) -> int:
    n = len(loader)
    return n if limit_batches is None else min(n, limit_batches)


class _RolledBack(Exception):
    """The loop state was replaced by an earlier one: restart the epoch where it now stands."""


class _Run:
    """The objects of one fit call, so each phase is a short method."""

    def __init__(self, **kw):
        self.__dict__.update(kw)
        self.state = LoopState()
        self.rank = dist.get_rank() if _distributed() else 0
        self.resumed_from = None
        self.last_checkpoint = None
        self.step_s = 0.0  # moving average of one optimizer step
        self.save_s = 0.0  # duration of the last save
        self.last_save = time.monotonic()
        self.timer = monitor.StepTimer(self.device, self.profile_every)
        self.guard = guards.NonFiniteGuard()
        self.initial = None  # the starting state as bytes, where fp16 may have to roll back to it

    def keep_initial_state(self) -> None:
        """Under automatic fp16 a non-finite loss rolls back to the last good state; before
        the first checkpoint that is the start (kept as bytes in host memory)."""
        if self.policy.name == "fp16" and self.policy.auto:
            buf = io.BytesIO()
            torch.save(self.snapshot(), buf)
            self.initial = buf.getvalue()

    def snapshot(self) -> dict:
        extra = {"loop": self.state.to_dict()}
        if self.early_stopping is not None:
            extra["early_stopping"] = self.early_stopping.state_dict()
        return snapshot(self.model, self.optimizer, self.scheduler, self.scaler, **extra)

    # ---- checkpoints ---------------------------------------------------
    def save(self, final: bool = False) -> None:
        self.state.save_requested = False
        self.last_save = time.monotonic()
        if self.checkpoints is None:
            return
        self.check_finite(agree=True)  # every rank: a NaN state never becomes a checkpoint
        if self.rank != 0:
            return
        started = time.monotonic()
        state = self.snapshot()
        metrics = self.state.history[-1] if self.state.history else {}
        path = self.checkpoints.save(state, step=self.state.step, epoch=self.state.epoch,
                                     metrics=metrics, config=self.config, final=final)
        self.last_checkpoint = str(path)
        self.save_s = time.monotonic() - started

    def resume(self) -> bool:
        """Restore the newest usable checkpoint of this run's identity (config, data,
        model); True if it marks finished training."""
        if self.checkpoints is None:
            return False
        self.checkpoints.bind(self.checkpoints.identity_for(self.config, self.model, self.loader))
        if not self.resume_enabled:  # start over: stale higher steps would win later resumes
            if self.rank == 0:
                self.checkpoints.clear()
            return False
        found = self.checkpoints.load_latest(map_location=self.device)
        if found is None:
            self.say_why_not_resumed()
            return False
        where, state = found
        self.load(state)
        self.resumed_from = str(where.path)
        self.last_checkpoint = str(where.path)
        if self.rank == 0:
            print(f"kagglekit: resumed from {where.path} (step {self.state.step}, "
                  f"epoch {self.state.epoch}, batch {self.state.batches_done})", flush=True)
        return bool(where.meta.get("final"))

    def load(self, state: dict) -> None:
        """Put ``state`` (a checkpoint's) into the live objects and the loop."""
        if state["loop"].get("precision") == "fp32" and self.policy.name == "fp16":
            self.fall_back_to_fp32()  # an earlier session gave up fp16 for this run
        restore(state, self.model, self.optimizer, self.scheduler, self.scaler)
        self.state = LoopState.from_dict(state["loop"])
        if self.early_stopping is not None and "early_stopping" in state:
            self.early_stopping.load_state_dict(state["early_stopping"])

    # ---- non-finite losses -----------------------------------------------
    def check_finite(self, agree: bool = False) -> None:
        """Act on a NaN/inf loss seen since the last check (one host sync)."""
        found = self.guard.found(self.state.loss_sum, self.state.step)
        bad = _agree([found is not None], self.device)[0] if agree else found is not None
        if not bad:
            return
        first, step, loss = found or (self.state.step, self.state.step, float("nan"))  # another rank's
        if not (self.policy.name == "fp16" and self.policy.auto):
            raise guards.NonFiniteLoss(guards.advice((first, step), loss, self.policy.name,
                                                     self.last_checkpoint))
        self.roll_back_to_fp32(first, step, loss)

    def roll_back_to_fp32(self, first: int, step: int, loss: float) -> None:
        """fp16 overflowed: continue from the last good state in fp32 (raises _RolledBack)."""
        found = self.checkpoints.load_latest(map_location=self.device) if self.checkpoints else None
        state = found[1] if found else torch.load(io.BytesIO(self.initial), map_location=self.device,
                                                  weights_only=True)
        self.fall_back_to_fp32()
        events = self.state.precision_events
        self.load(state)
        good = self.state.step
        self.state.precision = "fp32"
        self.state.precision_events = events + [{"steps": [first, step], "loss": loss, "from": "fp16",
                                                 "to": "fp32", "resumed_at_step": good}]
        self.guard = guards.NonFiniteGuard(good)
        if self.rank == 0:
            print(f"kagglekit: the loss became {loss} between steps {first} and {step} under fp16; "
                  f"continuing in fp32 from the last good state (step {good})", file=sys.stderr,
                  flush=True)
        raise _RolledBack

    def fall_back_to_fp32(self) -> None:
        self.policy = precision_mod.Precision("fp32", self.device.type)
        self.scaler = self.policy.make_scaler()

    def say_why_not_resumed(self) -> None:
        """One line naming what differs from the newest checkpoint of another run."""
        others = self.checkpoints.others() if self.rank == 0 else []
        if not others:
            return
        other = others[0]
        why = self.checkpoints.identity.differences(other.meta.get("identity") or
                                                    {"config": other.meta.get("config", {})})
        warnings.warn(f"not resuming {other.path}: it was trained with "
                      f"{'; '.join(why) or 'another identity'}. Training from scratch in "
                      f"{self.checkpoints.directory} (that run's checkpoints are kept).", stacklevel=4)

    # ---- the loop ------------------------------------------------------
    def should_stop_for_time(self, steps_ahead: int = 1) -> bool:
        # Leave room for the steps until the next decision and a save, with a safety factor.
        return not self.budget.allows(2 * steps_ahead * self.step_s + 2 * self.save_s)

    def after_step(self) -> str | None:
        """Hooks, then the decisions to stop or save; returns a stop reason or None.

        Under DDP the ranks must decide together, and agreeing costs a collective and a
        host sync, so they decide every ``AGREE_EVERY`` steps (the same steps on all).
        """
        if self.on_step_end is not None:
            self.on_step_end(self.state)
        if self.max_steps is not None and self.state.step >= self.max_steps:
            return "max_steps"
        if self.state.step % AGREE_EVERY == 0:
            self.check_finite(agree=True)  # where DDP syncs anyway; one host sync per 16 steps
        every = AGREE_EVERY if _distributed() else 1
        if self.state.step % every:
            return None
        due = self.save_every_min is not None and \
            time.monotonic() - self.last_save >= self.save_every_min * 60
        out_of_time, stop, save, interrupted = _agree(
            [self.should_stop_for_time(every), self.state.stop_requested,
             due or self.state.save_requested, guards.stop_requested()], self.device)
        if interrupted:
            return "interrupted"
        if out_of_time:
            return "time_budget"
        if stop:
            return "requested"
        if save:
            self.save()
        return None

    def optimizer_step(self, micro: list, timer=None) -> torch.Tensor:
        """One optimizer step over ``micro``; on OOM all ranks shrink the batch together."""
        manual = self.oom_backoff and _distributed()
        while True:
            try:
                loss = self.compiled.run(lambda m: step_mod.backward(
                    m, micro, self.loss_fn, self.policy, self.scaler, split=self.state.split,
                    sync="manual" if manual else "ddp",
                    graphs=self.graphs if self.graphs.active else None))
                oom = False
            except step_mod.OOM_ERRORS:
                if not self.oom_backoff:
                    raise
                oom = True
            if manual:
                oom = _agree([oom], self.device)[0]
            if not oom:
                break
            self.back_off(micro)
        if timer:
            timer.mark("compute")
        if manual:
            step_mod.all_reduce_gradients(self.model)
        step_mod.apply(self.model, self.optimizer, self.scaler, self.clip_grad_norm)
        if timer:
            timer.mark("optimizer")
        return loss

    def back_off(self, micro: list) -> None:
        step_mod.free_after_oom(self.optimizer)
        per_gpu = step_mod.batch_size(micro[0]) // self.state.split
        if per_gpu // 2 < self.min_batch:
            raise step_mod.OutOfMemoryFloor(
                f"CUDA out of memory even at a per-GPU batch of {per_gpu} (floor "
                f"min_batch={self.min_batch}). Use a smaller model, precision='fp16'/'bf16', "
                "accel.checkpoint_blocks(), or a shorter input.")
        self.state.split *= 2
        self.state.oom_events.append({"step": self.state.step, "per_gpu_batch": per_gpu // 2})
        if self.rank == 0:
            print(f"kagglekit: CUDA out of memory at step {self.state.step}; every rank now runs "
                  f"per-GPU batches of {per_gpu // 2} (split x{self.state.split}, same "
                  "effective batch)", flush=True)

    def train_epoch(self, per_epoch: int, bar) -> str | None:
        st = self.state
        skip = data.start_epoch(self.loader, st.epoch, st.batches_done)
        self.model.train()
        batches = iter(self.loader)
        for _ in range(skip):  # a loader that cannot seek: fast-forward by reading
            data.next_batch(batches, self.loader)
        while st.batches_done < per_epoch:
            group = min(self.accumulate, per_epoch - st.batches_done)
            timer = self.timer if self.timer.sampled(st.step) else None
            if timer:
                timer.mark("start")
            raw = [data.next_batch(batches, self.loader) for _ in range(group)]
            if timer:
                timer.mark("data_wait")
            micro = [data.to_device(b, self.device) for b in raw]
            if timer:
                timer.mark("h2d")
            started = time.monotonic()
            loss = self.optimizer_step(micro, timer)
            seen = sum(step_mod.batch_size(b) for b in micro)
            if timer:
                timer.record(st.step, seen)
            st.samples += seen
            st.epoch_samples += seen
            st.loss_sum = st.loss_sum + loss
            st.loss_steps += 1
            st.batches_done += group
            st.step += 1
            if self.scheduler is not None and self.scheduler_interval == "step":
                self.scheduler.step()
            elapsed = time.monotonic() - started
            self.step_s = elapsed if self.step_s == 0 else 0.9 * self.step_s + 0.1 * elapsed
            bar.update(1)
            reason = self.after_step()
            if reason is not None:
                return reason
        return None

    def close_epoch(self, started: float) -> bool:
        """Evaluate, record, schedule, maybe early-stop; True when training should stop."""
        st = self.state
        seconds = time.monotonic() - started
        world = dist.get_world_size() if _distributed() else 1
        record = {"epoch": st.epoch, "step": st.step,
                  "train_loss": float(st.loss_sum) / max(st.loss_steps, 1),
                  "lr": self.optimizer.param_groups[0]["lr"], "seconds": round(seconds, 3),
                  "samples_per_s": round(st.epoch_samples * world / max(seconds, 1e-9), 2)}
        record.update(self.evaluate_epoch())
        st.history.append(record)
        if self.scheduler is not None and self.scheduler_interval == "epoch":
            if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                self.scheduler.step(record[self.early_stopping.monitor if self.early_stopping
                                           else "val_loss"])
            else:
                self.scheduler.step()
        stop = self.early_stopping is not None and self.early_stopping.update(record)
        if self.on_epoch_end is not None:
            self.on_epoch_end(st)
        st.epoch, st.batches_done, st.loss_sum, st.loss_steps = st.epoch + 1, 0, 0.0, 0
        st.epoch_samples = 0
        return stop

    def evaluate_epoch(self) -> dict:
        if self.evaluate is None and self.val_loader is None:
            return {}
        self.model.eval()
        with torch.no_grad(), self.policy.autocast():
            if self.evaluate is not None:
                metrics = self.evaluate(self.model)
            else:
                metrics = evaluate_loss(self.model, self.val_loader, self.loss_fn, self.device,
                                        self.limit_batches)
        self.model.train()
        return {k: float(v) for k, v in metrics.items()}


def fit(model: torch.nn.Module, optimizer: torch.optim.Optimizer, train_loader, loss_fn: LossFn,
        *, epochs: int = 1, val_loader=None, evaluate: Callable | None = None,
        scheduler=None, scheduler_interval: str = "step", precision="auto", device=None,
        accumulate: int = 1, clip_grad_norm: float | None = None, compile="off",
        cuda_graphs: str = "off", max_steps: int | None = None, limit_batches: int | None = None,
        checkpoints: CheckpointManager | None = None, save_every_min: float | None = 20.0,
        resume: bool = True, time_budget=None, early_stopping: EarlyStopping | None = None,
        on_step_end: Callable | None = None, on_epoch_end: Callable | None = None,
        oom_backoff: bool = True, min_batch: int = 1, profile_every: int = 25,
        monitor_gpu: bool = True, progress: bool = True,
        config: dict | None = None) -> FitResult:
    """Train ``model`` and return its history; resumable at any optimizer step.

    Args:
        loss_fn: ``loss_fn(model, batch) -> scalar loss``; the batch is already on the
            device. ``supervised(criterion)`` builds one for (x, y) batches.
        epochs: passes over ``train_loader`` (the ``make_loader`` sampler makes a
            mid-epoch resume continue with the very next batch).
        val_loader / evaluate: per-epoch validation; ``evaluate(model) -> dict`` wins,
            else the mean loss over ``val_loader`` is recorded as ``val_loss``.
        scheduler / scheduler_interval: any torch scheduler, stepped per "step" or "epoch".
        precision: "auto" (per card: bf16 >= 8.0, fp16 + GradScaler on 7.x, fp32 on CPU),
            "fp32", "fp16", "bf16", or a ``Precision``.
        accumulate: micro-batches per optimizer step (no DDP sync between them).
        clip_grad_norm: max global gradient norm (applied to unscaled gradients).
        compile: "off", "auto" (torch.compile, eager on failure), "strict", or a dict
            of torch.compile options (auto mode).
        cuda_graphs: "off", "auto" or "strict": capture the model's training forward and
            backward as CUDA graphs at the first step and replay them (one launch each
            instead of one per kernel: for small, launch-bound models). Steps whose
            inputs change shape run eagerly; "auto" also falls back when capture fails
            ("strict" raises then, and before training when there is no CUDA device),
            and ``FitResult.cuda_graphs`` says how many forwards replayed and why not.
            Warm-up runs the first batch 3 extra times (11 under DDP) without updating
            weights or BatchNorm statistics; it does draw from the CUDA RNG.
        max_steps / limit_batches: cap optimizer steps in total / batches per epoch.
        checkpoints: where to save and resume from; None disables both.
        save_every_min: minutes between mid-epoch saves (0: after every step; None: only
            at epoch ends). Saves also happen at epoch ends, on request, and at the end.
        resume: continue from the newest usable checkpoint (working dir or inputs);
            False deletes this run's checkpoints in the working dir and starts over.
        time_budget: seconds or a ``Budget``; None means the Kaggle session limit on
            Kaggle, no limit elsewhere. The loop stops with a checkpoint before it.
        on_step_end / on_epoch_end: ``hook(state: LoopState)``; may call
            ``state.request_stop()`` or ``state.request_checkpoint()``.
        oom_backoff: on CUDA out-of-memory, retry the step with each batch cut in two
            (same effective batch), down to ``min_batch`` samples per GPU. Under DDP all
            ranks agree on it; gradients are then all-reduced after the backward pass
            (no overlap with compute): pass False for DDP's overlapped sync.
        profile_every: time the phases of one step in this many (data wait, copy,
            compute, optimizer) with CUDA events on GPU (no host sync), wall clock on CPU.
        monitor_gpu: sample GPU utilisation and memory through NVML (rank 0, on GPU).
        config: stored in every checkpoint's sidecar.
    """
    if scheduler_interval not in ("step", "epoch"):
        raise ValueError(f"scheduler_interval={scheduler_interval!r} must be 'step' or 'epoch'")
    if accumulate < 1:
        raise ValueError(f"accumulate={accumulate} must be >= 1")
    if compile != "off" and cuda_graphs != "off":
        raise ValueError("compile and cuda_graphs are two ways to the same end: pass "
                         "compile={'mode': 'reduce-overhead'} or cuda_graphs='auto', not both")
    started = time.monotonic()
    device = torch.device(device) if device is not None else _default_device()
    policy = resolve_precision(precision, device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed shapes: let cuDNN pick its fastest kernels
    model.to(device)
    train_model = _wrap(model, device)
    graphs = cudagraph.for_fit(train_model, cuda_graphs, device)
    run = _Run(model=train_model, optimizer=optimizer, loader=train_loader, loss_fn=loss_fn,
               val_loader=val_loader, evaluate=evaluate, scheduler=scheduler,
               scheduler_interval=scheduler_interval, policy=policy, device=device,
               accumulate=accumulate, clip_grad_norm=clip_grad_norm,
               compiled=accel.Compiled(train_model, compile), graphs=graphs,
               scaler=policy.make_scaler(),
               max_steps=max_steps, limit_batches=limit_batches, checkpoints=checkpoints,
               save_every_min=save_every_min, resume_enabled=resume,
               budget=Budget.resolve(time_budget), early_stopping=early_stopping,
               on_step_end=on_step_end, on_epoch_end=on_epoch_end, oom_backoff=oom_backoff,
               min_batch=min_batch, profile_every=profile_every, config=config or {})
    finished = run.resume()
    run.guard = guards.NonFiniteGuard(run.state.step)
    run.keep_initial_state()
    start_step = run.state.step
    loop_started = time.monotonic()
    sampler = monitor.GPUSampler()
    if monitor_gpu and device.type == "cuda" and run.rank == 0 and not finished:
        sampler.start()
    try:
        graphs.install()
        with guards.Interrupts():  # Stop button / SIGTERM: save after this step, then stop
            stopped = "already_complete" if finished else _loop(run, epochs, progress)
    finally:
        sampler.stop()
        graphs.remove()
    if stopped == "interrupted":
        raise guards.Interrupted(f"stopped on request at step {run.state.step}; the run resumes "
                                 f"from {run.last_checkpoint or 'its start'} when started again")
    world = dist.get_world_size() if _distributed() else 1
    rate = run.state.samples / max(time.monotonic() - loop_started, 1e-9)
    return FitResult(history=run.state.history, steps=run.state.step, epochs=run.state.epoch,
                     stopped=stopped, seconds=time.monotonic() - started, precision=run.policy.name,
                     precision_events=list(run.state.precision_events),
                     compile=run.compiled.status, cuda_graphs=graphs.status,
                     resumed_from=run.resumed_from,
                     checkpoint=run.last_checkpoint, steps_this_session=run.state.step - start_step,
                     world_size=world, samples_per_s=rate * world,
                     oom_events=list(run.state.oom_events), breakdown=run.timer.summary(),
                     gpu=sampler.summary(), gpu_samples=sampler.samples)


def _loop(run: _Run, epochs: int, progress: bool) -> str:
    per_epoch = _epoch_batches(run.loader, run.limit_batches)
    total = epochs * math.ceil(per_epoch / run.accumulate)
    if run.max_steps is not None:
        total = min(total, run.max_steps)
    bar = progress_bar(total, "train", enabled=progress and run.rank == 0)
    bar.update(run.state.step)
    stopped = None
    try:
        while True:
            try:
                while run.state.epoch < epochs and stopped is None:
                    stopped = _epoch(run, per_epoch, epochs, bar)
                stopped = stopped or "completed"
                run.save(final=stopped not in ("time_budget", "interrupted"))
                return stopped
            except _RolledBack:  # fp16 overflowed: the state went back; go on from there
                stopped = None
    finally:
        bar.close()


def _epoch(run: _Run, per_epoch: int, epochs: int, bar) -> str | None:
    """Train (the rest of) one epoch, then close it; a stop reason or None."""
    epoch_started = time.monotonic()
    stopped = run.train_epoch(per_epoch, bar)
    if stopped in ("time_budget", "interrupted"):
        return stopped  # no time to evaluate; the next session closes this epoch
    if run.state.batches_done >= per_epoch:
        run.check_finite(agree=True)  # before the epoch's loss goes into the history
        if run.close_epoch(epoch_started):
            stopped = "early_stopping"
        if run.state.history:
            bar.set_postfix_str(_postfix(run.state.history[-1]))
        if stopped is None and run.state.epoch < epochs:
            run.save()
    return stopped


def _postfix(record: dict) -> str:
    keys = [k for k in record if k not in ("epoch", "step", "lr", "seconds")]
    return " ".join(f"{k}={record[k]:.4g}" for k in keys if isinstance(record[k], float))
