"""``fit``: the training loop, readable on one screen.

    resume (or skip a finished run) -> for each epoch: position the loader, take
    optimizer steps (each: read, copy, step, hooks, decide to stop or save) ->
    close the epoch (evaluate, schedule, early-stop, save) -> the final save.

The parts are public, so a hand-written loop can have the same guarantees:
``step.Stepper`` (one optimizer step with OOM back-off), ``durable.Durable``
(checkpoints, resume, non-finite losses), ``ranks`` (rank, device, agreement),
``fitoptions`` (the option groups and what the run policy decides).
"""
from __future__ import annotations

import math
import time
from typing import Callable

import torch

from . import accel, cudagraph, data, fitoptions, guards, monitor, policy, ranks, workcap
from . import precision as precision_mod
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
                self.keeper.save(final=stopped not in ("time_budget", "interrupted"))
                return stopped
            except RolledBack:  # fp16 overflowed: the state went back; go on from there
                continue

    def train_epoch(self, bar) -> str | None:
        st = self.state
        skip = data.start_epoch(self.loader, st.epoch, st.batches_done)  # before iter()
        batches = iter(self.loader)
        for _ in range(skip):
            data.next_batch(batches, self.loader)  # a loader that cannot seek: read ahead
        self.parts.model.train()
        while st.batches_done < self.per_epoch:
            timer = self.timer.for_step(st.step)
            timer.mark("start")
            group = min(self.accumulate, self.per_epoch - st.batches_done)
            raw = [data.next_batch(batches, self.loader) for _ in range(group)]
            timer.mark("data_wait")
            micro = [data.to_device(b, self.parts.device) for b in raw]
            timer.mark("h2d")
            started = time.monotonic()
            loss = self.stepper(micro, timer)
            seen = sum(batch_size(b) for b in micro)
            timer.record(st.step, seen)
            st.samples, st.epoch_samples = st.samples + seen, st.epoch_samples + seen
            st.loss_sum, st.loss_steps = st.loss_sum + loss, st.loss_steps + 1
            st.batches_done, st.step = st.batches_done + group, st.step + 1
            if self.parts.scheduler is not None and self.scheduler_interval == "step":
                self.parts.scheduler.step()
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
        every = AGREE_EVERY if ranks.distributed() else 1
        if st.step % every:
            return None
        # Room for the steps until the next decision and a save, with a safety factor.
        short = not self.durability.time_budget.allows(2 * every * self.step_s + 2 * self.keeper.save_s)
        out_of_time, stop, save, interrupted = ranks.agree(
            [short, st.stop_requested, self.keeper.due(self.durability.save_every_min),
             guards.stop_requested()], self.parts.device)
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
                  "train_loss": float(st.loss_sum) / max(st.loss_steps, 1),
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


def fit(model: torch.nn.Module, optimizer: torch.optim.Optimizer, train_loader, loss_fn: LossFn,
        *, epochs: int = 1, val_loader=None, evaluate: Callable | None = None, scheduler=None,
        scheduler_interval: str = "step", device=None, speed: Speed | None = None,
        durability: Durability | None = None, watch: Watch | None = None, **options) -> FitResult:
    """Train ``model`` and return its history; resumable at any optimizer step.

    What to train:
        loss_fn: ``loss_fn(model, batch) -> scalar loss``; the batch is already on the
            device. ``supervised(criterion)`` builds one for (x, y) batches.
        epochs: passes over ``train_loader`` (the ``make_loader`` sampler makes a
            mid-epoch resume continue with the very next batch).
        val_loader / evaluate: per-epoch validation; ``evaluate(model) -> dict`` wins,
            else the mean loss over ``val_loader`` is recorded as ``val_loss``.
        scheduler / scheduler_interval: any torch scheduler, stepped per "step" or "epoch".
        device: default: the launch context's (cuda:<rank> under ``kk.launch``).
    How: ``speed``, ``durability`` and ``watch`` (see ``fitoptions``), or any of their
        fields by name: ``precision``, ``compile``, ``cuda_graphs``, ``accumulate``,
        ``clip_grad_norm``, ``oom_backoff``, ``min_batch``; ``checkpoints``,
        ``save_every_min``, ``resume``, ``time_budget``, ``config``; ``early_stopping``,
        ``on_step_end``, ``on_epoch_end``, ``max_steps``, ``limit_batches``,
        ``progress``, ``profile_every``, ``monitor_gpu``. Unset ones follow the run
        ``kk.start`` set up (precision, force_retrain, time_budget_s, config).
    """
    if scheduler_interval not in ("step", "epoch"):
        raise ValueError(f"scheduler_interval={scheduler_interval!r} must be 'step' or 'epoch'")
    started = time.monotonic()
    _refuse_empty(train_loader)
    run = policy.current()
    speed, durability, watch = fitoptions.group(speed, durability, watch, options)
    durability = durability.resolved(run)
    watch = workcap.capped_watch(watch)
    device = torch.device(device) if device is not None else ranks.default_device()
    chosen = precision_mod.resolve(speed.precision or (run.precision if run else "auto"), device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed shapes: let cuDNN pick its fastest kernels
    model.to(device)
    trained = ranks.wrap(model, device)
    graphs = cudagraph.for_fit(trained, speed.cuda_graphs, device)
    parts = Parts(trained, optimizer, scheduler, chosen, chosen.make_scaler(), device)
    keeper = Durable(parts, durability.checkpoints, config=durability.config,
                     early_stopping=watch.early_stopping)
    stepper = Stepper(parts, loss_fn, accel.Compiled(trained, speed.compile), graphs,
                      clip_grad_norm=speed.clip_grad_norm, oom_backoff=speed.oom_backoff,
                      min_batch=speed.min_batch)
    validate = _validation(parts, evaluate, val_loader, loss_fn, watch.limit_batches)
    loop = _Loop(parts, keeper, stepper, train_loader, epochs=epochs,
                 scheduler_interval=scheduler_interval, validate=validate, speed=speed,
                 watch=watch, durability=durability)
    finished = keeper.resume(train_loader, enabled=durability.resume)
    start_step, loop_started = parts.state.step, time.monotonic()
    sampler = monitor.GPUSampler()
    if watch.monitor_gpu and device.type == "cuda" and ranks.is_main() and not finished:
        sampler.start()
    bar = progress_bar(_total_steps(loop, epochs), "train", enabled=watch.progress and ranks.is_main(),
                       initial=parts.state.step)
    try:
        graphs.install()
        with guards.Interrupts():  # Stop button / SIGTERM: save after this step, then stop
            stopped = "already_complete" if finished else loop.run(bar)
    finally:
        bar.close()
        sampler.stop()
        graphs.remove()
    if stopped == "interrupted":
        raise guards.Interrupted(f"stopped on request at step {parts.state.step}; the run resumes "
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
                     gpu_samples=sampler.samples, session=run.session if run else "")


def _refuse_empty(loader) -> None:
    """A loader that yields no batch would "train" zero steps and look like success."""
    try:
        batches = len(loader)
    except TypeError:
        return  # an iterable without a length: nothing to check up front
    if batches == 0:
        dataset, size = getattr(loader, "dataset", None), getattr(loader, "batch_size", "?")
        count = len(dataset) if dataset is not None and hasattr(dataset, "__len__") else "?"
        raise ValueError(f"the training loader yields no batch: {count} samples, batch_size={size}, "
                         f"drop_last={getattr(loader, 'drop_last', '?')} (per rank). Use a smaller "
                         "batch_size or drop_last=False (kk.make_loader never drops the only batch).")


def _total_steps(loop: _Loop, epochs: int) -> int:
    total = epochs * math.ceil(loop.per_epoch / loop.accumulate)
    return total if loop.watch.max_steps is None else min(total, loop.watch.max_steps)


def _validation(parts: Parts, evaluate, val_loader, loss_fn, limit_batches) -> Callable[[], dict]:
    """The per-epoch validation: ``evaluate(model)``, else the mean loss over ``val_loader``."""
    def validate() -> dict:
        if evaluate is None and val_loader is None:
            return {}
        parts.model.eval()
        with torch.no_grad(), parts.precision.autocast():
            metrics = evaluate(parts.model) if evaluate is not None else \
                evaluate_loss(parts.model, val_loader, loss_fn, parts.device, limit_batches)
        parts.model.train()
        return {k: float(v) for k, v in metrics.items()}
    return validate


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
    if ranks.distributed():
        torch.distributed.all_reduce(total)
    return {"val_loss": (total[0] / total[1].clamp(min=1)).item()}


def _postfix(record: dict) -> str:
    keys = [k for k in record if k not in ("epoch", "step", "lr", "seconds")]
    return " ".join(f"{k}={record[k]:.4g}" for k in keys if isinstance(record[k], float))
