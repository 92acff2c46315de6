"""``fit``: the training loop, readable on one screen.

    resume (or skip a finished run) -> for each epoch: position the loader, take
    optimizer steps (each: read, copy, step, hooks, decide to stop or save) ->
    close the epoch (evaluate, schedule, early-stop, save) -> the final save.

The parts are public, so a hand-written loop can have the same guarantees:
``step.Stepper`` (one optimizer step with OOM back-off), ``durable.Durable``
(checkpoints, resume, non-finite losses), ``ranks`` (rank, device, agreement),
``fitoptions`` (the option groups and what the run context decides), ``schedule``
(a run's length, which is run control: more epochs train on).
"""
from __future__ import annotations

import contextlib
import itertools
import time
from typing import Callable

import torch

from . import accel, cudagraph, fitoptions, monitor, schedule, validation
from ..machine import precision as precision_mod, signals
from ..parallel import loaders as data, ranks
from .durable import Durable, RolledBack
from .fitoptions import Durability, Speed, Watch  # noqa: F401 (re-exported)
from .fitstate import EarlyStopping, FitResult, LoopState, Parts  # noqa: F401 (re-exported)
from .progress import bar as progress_bar
from .step import Stepper, batch_size

LossFn = Callable[[torch.nn.Module, object], torch.Tensor]
AGREE_EVERY = 16  # steps between the ranks' joint stop/save decisions under DDP


def supervised(criterion: Callable) -> LossFn:
    """``loss_fn`` for (inputs, targets) batches: ``criterion(model(x), y)``."""
    def loss_fn(model, batch):
        x, y = batch
        return criterion(model(x), y)
    return loss_fn


class _Loop:
    """One fit: the loop below, and the decisions it takes between steps."""

    def __init__(self, parts, keeper, stepper, loader, *, epochs, scheduler_interval, validate,
                 speed: Speed, watch: Watch, durability: Durability):
        self.parts, self.keeper, self.stepper, self.loader = parts, keeper, stepper, loader
        self.epochs, self.scheduler_interval, self.validate = epochs, scheduler_interval, validate
        self.watch, self.durability, self.accumulate = watch, durability, speed.accumulate
        self.step_s = 0.0  # moving average of one optimizer step
        self.distributed = ranks.distributed()
        self.every = AGREE_EVERY if self.distributed else 1  # steps between decisions
        self.timer = monitor.StepTimer(parts.device, watch.profile_every)
        n = len(loader)
        self.per_epoch = n if watch.limit_batches is None else min(n, watch.limit_batches)

    @property
    def state(self) -> LoopState:
        return self.parts.state  # replaced wholesale on resume and roll-back

    def run(self, bar) -> str:
        while True:
            try:
                stopped = None
                while self.state.epoch < self.epochs and stopped is None:
                    started = time.monotonic()
                    stopped = self.train_epoch(bar)
                    if stopped in ("time_budget", "interrupted"):
                        break  # no time to evaluate: the next session closes this epoch
                    stopped = self.close_epoch(started, bar) or stopped
                    if stopped is None and self.state.epoch < self.epochs:
                        self.keeper.save()
                stopped = stopped or "completed"
                self.state.stopped = stopped
                self.keeper.save(final=stopped not in ("time_budget", "interrupted"))
                return stopped
            except RolledBack:  # fp16 overflowed: the state went back; go on from there
                continue

    def train_epoch(self, bar) -> str | None:
        st, loader, device = self.state, self.loader, self.parts.device
        skip = data.start_epoch(loader, st.epoch, st.batches_done)  # before iter()
        batches = iter(loader)
        for _ in range(skip):
            data.next_batch(batches, loader)  # a loader that cannot seek: read ahead
        self.parts.model.train()
        per_step_scheduler = self.parts.scheduler if self.scheduler_interval == "step" else None
        while st.batches_done < self.per_epoch:
            timer = self.timer.for_step(st.step)  # the null timer on unsampled steps
            timer.mark("start")
            group = min(self.accumulate, self.per_epoch - st.batches_done)
            raw = [data.next_batch(batches, loader) for _ in range(group)]
            timer.mark("data_wait")
            micro = [data.to_device(b, device) for b in raw]
            timer.mark("h2d")
            started = time.monotonic()
            st.add_loss(self.stepper(micro, timer))
            seen = sum(batch_size(b) for b in micro)
            timer.record(st.step, seen)
            st.samples, st.epoch_samples = st.samples + seen, st.epoch_samples + seen
            st.batches_done, st.step = st.batches_done + group, st.step + 1
            if per_step_scheduler is not None:
                per_step_scheduler.step()
            elapsed = time.monotonic() - started
            self.step_s = elapsed if self.step_s == 0 else 0.9 * self.step_s + 0.1 * elapsed
            bar.update(1)
            reason = self.after_step()
            if reason is not None:
                return reason
        return None

    def after_step(self) -> str | None:
        """Hooks, then the decisions to stop or save; a stop reason or None.

        Under DDP the ranks decide together, and agreeing costs a collective and a host
        sync, so they decide every ``AGREE_EVERY`` steps (the same steps on all ranks).
        """
        st, w = self.state, self.watch
        if w.on_step_end is not None:
            w.on_step_end(st)
        if w.max_steps is not None and st.step >= w.max_steps:
            return "max_steps"
        if st.step % AGREE_EVERY == 0:
            self.keeper.check_finite(agree=True)  # one host sync per 16 steps
        if st.step % self.every:
            return None
        # Room for the steps until the next decision and a save, with a safety factor.
        short = not self.durability.time_budget.allows(
            2 * self.every * self.step_s + 2 * self.keeper.save_s)
        flags = [short, st.stop_requested, self.keeper.due(self.durability.save_every_min),
                 signals.stop_requested()]
        if self.distributed:  # every rank takes the same decision
            flags = ranks.agree(flags, self.parts.device)
        out_of_time, stop, save, interrupted = flags
        if interrupted or out_of_time or stop:
            return "interrupted" if interrupted else "time_budget" if out_of_time else "requested"
        if save:
            self.keeper.save()
        return None

    def close_epoch(self, started: float, bar) -> str | None:
        """Evaluate, record, schedule, maybe early-stop; "early_stopping" or None."""
        st, p = self.state, self.parts
        if st.batches_done < self.per_epoch:
            return None  # stopped mid-epoch (max_steps, a request)
        self.keeper.check_finite(agree=True)  # before the epoch's loss goes into the history
        seconds = time.monotonic() - started
        record = {"epoch": st.epoch, "step": st.step,
                  "train_loss": float(st.summed_loss()) / max(st.loss_steps, 1),
                  "lr": p.optimizer.param_groups[0]["lr"], "seconds": round(seconds, 3),
                  "samples_per_s": round(st.epoch_samples * ranks.world_size() / max(seconds, 1e-9), 2),
                  **self.validate()}
        st.history.append(record)
        early = self.keeper.early_stopping
        if p.scheduler is not None and self.scheduler_interval == "epoch":
            if isinstance(p.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                p.scheduler.step(record[early.monitor if early else "val_loss"])
            else:
                p.scheduler.step()
        stop = early is not None and early.update(record)
        if self.watch.on_epoch_end is not None:
            self.watch.on_epoch_end(st)
        st.epoch, st.batches_done, st.loss_sum, st.loss_steps, st.epoch_samples = st.epoch + 1, 0, 0.0, 0, 0
        bar.set_postfix_str(_postfix(record))
        return "early_stopping" if stop else None


U = fitoptions.UNSET


def fit(model: torch.nn.Module, optimizer: torch.optim.Optimizer, train_loader, loss_fn: LossFn,
        *, run=None, epochs: int = 1, val_loader=None, evaluate: Callable | None = None,
        scheduler=None, scheduler_interval: str = "step", device=None,
        speed: Speed | None = None, durability: Durability | None = None, watch: Watch | None = None,
        precision=U, compile=U, cuda_graphs=U, cudnn_benchmark=U, accumulate=U, clip_grad_norm=U,
        oom_backoff=U, min_batch=U,
        checkpoints=U, save_every_min=U, resume=U, time_budget=U, config=U,
        early_stopping=U, on_step_end=U, on_epoch_end=U, max_steps=U, limit_batches=U,
        progress=U, profile_every=U, monitor_gpu=U) -> FitResult:
    """Train ``model`` and return its history; resumable at any optimizer step.

    What to train:
        loss_fn: ``loss_fn(model, batch) -> scalar loss``; the batch is already on the
            device. ``supervised(criterion)`` builds one for (x, y) batches.
        run: the run context (``kk.start``'s): the precision decided for the card,
            ``force_retrain``, the session's deadline, the config and its run-control keys,
            the sandbox's work cap. Without it: "auto" precision, resume, no deadline
            (Kaggle's session limit on Kaggle).
        epochs: passes over ``train_loader`` (the ``make_loader`` sampler makes a
            mid-epoch resume continue with the very next batch). Run control: a finished
            run asked for more epochs trains on from its last checkpoint (``schedule``).
        val_loader / evaluate: per-epoch validation; ``evaluate(model) -> dict`` wins,
            else the mean loss over ``val_loader`` is recorded as ``val_loss``.
        scheduler / scheduler_interval: any torch scheduler, stepped per "step" or "epoch",
            built for this fit's length.
        device: default: the launch context's (cuda:<rank> under ``kk.launch``).
    How (see ``fitoptions``): a group (``speed``, ``durability``, ``watch``) or its fields:
        Speed: precision, compile, cuda_graphs, cudnn_benchmark, accumulate, clip_grad_norm,
            oom_backoff, min_batch.
        Durability: checkpoints (a manager, or a name of the run's), save_every_min,
            resume, time_budget, config.
        Watch: early_stopping, on_step_end, on_epoch_end, max_steps, limit_batches,
            progress, profile_every, monitor_gpu.
    """
    if scheduler_interval not in ("step", "epoch"):
        raise ValueError(f"scheduler_interval={scheduler_interval!r} must be 'step' or 'epoch'")
    named = dict(precision=precision, compile=compile, cuda_graphs=cuda_graphs,
                 cudnn_benchmark=cudnn_benchmark, accumulate=accumulate,
                 clip_grad_norm=clip_grad_norm, oom_backoff=oom_backoff, min_batch=min_batch,
                 checkpoints=checkpoints, save_every_min=save_every_min, resume=resume,
                 time_budget=time_budget, config=config, early_stopping=early_stopping,
                 on_step_end=on_step_end, on_epoch_end=on_epoch_end, max_steps=max_steps,
                 limit_batches=limit_batches, progress=progress, profile_every=profile_every,
                 monitor_gpu=monitor_gpu)
    speed, durability, watch = fitoptions.group(speed, durability, watch, named)
    validation.refuse_empty(train_loader)
    device = torch.device(device) if device is not None else ranks.default_device()
    with _cudnn_benchmark(speed.cudnn_benchmark and device.type == "cuda"):
        return _fit(model, optimizer, train_loader, loss_fn, run, epochs, val_loader, evaluate,
                    scheduler, scheduler_interval, device, speed, durability.resolved(run),
                    fitoptions.capped(watch, run.work_cap if run else None))


def _precision(speed: Speed, run, device: torch.device):
    """The run's precision, decided once at ``kk.start`` for this card; another only when
    asked for (``precision=``) or when the fit runs on another kind of device."""
    if speed.precision is None and run is not None and run.precision.device_type == device.type:
        return run.precision
    return precision_mod.resolve(speed.precision or (run.config.get("precision", "auto")
                                                     if run else "auto"), device)


def _fit(model, optimizer, train_loader, loss_fn, run, epochs, val_loader, evaluate, scheduler,
         scheduler_interval, device, speed, durability, watch) -> FitResult:
    started = time.monotonic()
    chosen = _precision(speed, run, device)
    if any(t.device != device for t in itertools.chain(model.parameters(), model.buffers())):
        model.to(device)  # a walk over every tensor: skipped when all are there (each fit of a search)
    trained = ranks.wrap(model, device)
    graphs = cudagraph.for_fit(trained, speed.cuda_graphs, device)
    parts = Parts(trained, optimizer, scheduler, chosen, chosen.make_scaler(), device)
    keeper = Durable(parts, durability.checkpoints, config=durability.config,
                     early_stopping=watch.early_stopping)
    stepper = Stepper(parts, loss_fn, accel.Compiled(trained, speed.compile), graphs,
                      clip_grad_norm=speed.clip_grad_norm, oom_backoff=speed.oom_backoff,
                      min_batch=speed.min_batch)
    validate = validation.validation(parts, evaluate, val_loader, loss_fn, watch.limit_batches)
    loop = _Loop(parts, keeper, stepper, train_loader, epochs=epochs,
                 scheduler_interval=scheduler_interval, validate=validate, speed=speed,
                 watch=watch, durability=durability)
    length = schedule.Length(epochs, watch.max_steps, loop.per_epoch, speed.accumulate)
    schedule.check_room(scheduler, scheduler_interval, length)
    built = schedule.Start(scheduler, optimizer)
    finished = keeper.resume(train_loader, enabled=durability.resume, length=length, start=built)
    parts.state.length = parts.state.length or length.as_dict()
    start_step, loop_started = parts.state.step, time.monotonic()
    sampler = monitor.GPUSampler()
    if watch.monitor_gpu and device.type == "cuda" and ranks.is_main() and not finished:
        sampler.start()
    bar = progress_bar(length.steps, "train", enabled=watch.progress and ranks.is_main(),
                       initial=parts.state.step)
    try:
        graphs.install()
        with signals.Interrupts():  # Stop button / SIGTERM: save after this step, then stop
            stopped = "already_complete" if finished else loop.run(bar)
    finally:
        bar.close()
        sampler.stop()
        graphs.remove()
    if stopped == "interrupted":
        raise signals.Interrupted(f"stopped on request at step {parts.state.step}; the run resumes "
                                  f"from {keeper.last_checkpoint or 'its start'} when started again")
    st, world = parts.state, ranks.world_size()
    rate = st.samples / max(time.monotonic() - loop_started, 1e-9)
    return FitResult(history=st.history, steps=st.step, epochs=st.epoch, stopped=stopped,
                     seconds=time.monotonic() - started, precision=parts.precision.name,
                     precision_events=list(st.precision_events), compile=stepper.compiled.status,
                     cuda_graphs=graphs.status, resumed_from=keeper.resumed_from,
                     checkpoint=keeper.last_checkpoint, steps_this_session=st.step - start_step,
                     world_size=world, samples_per_s=rate * world, oom_events=list(st.oom_events),
                     breakdown=loop.timer.summary(), gpu=sampler.summary(),
                     gpu_samples=sampler.samples, session=run.session if run else "",
                     extended=keeper.extended)


@contextlib.contextmanager
def _cudnn_benchmark(enabled: bool):
    """cuDNN's kernel autotuning for this fit only (fixed shapes), set back afterwards."""
    previous = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = enabled or previous
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = previous


def _postfix(record: dict) -> str:
    keys = [k for k in record if k not in ("epoch", "step", "lr", "seconds")]
    return " ".join(f"{k}={record[k]:.4g}" for k in keys if isinstance(record[k], float))
