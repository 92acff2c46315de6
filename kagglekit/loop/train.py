"""``fit``: a training run resumable at any optimizer step, assembled from public parts.

    resume (or skip a finished run) -> the epoch loop (``epochs.EpochLoop``) -> the result.

A hand-written loop can have the same guarantees from the same parts: ``step.Stepper`` (one
optimizer step with OOM back-off), ``durable.Durable`` (checkpoints, resume, non-finite
losses), ``ranks`` (rank, device, agreement), ``schedule`` (a run's length, which is run
control: more epochs train on).
"""
from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..machine import ascard, precision as precision_mod, signals
from ..machine.budget import Unfinished, partial_unwanted
from ..parallel import ranks
from . import accel, cudagraph, fitoptions, monitor, probe, schedule, validation
from .durable import Durable
from .ema import Averaged, Ema  # noqa: F401 (kk.Ema)
from .epochs import EpochLoop
from .fitoptions import Alone, Monitor, Speed, Stop, Watch  # noqa: F401 (kk.Alone, kk.Speed, kk.Monitor)
from .fitstate import EarlyStopping, FitResult, Parts  # noqa: F401 (kk.EarlyStopping, kk.FitResult)
from .progress import bar as progress_bar
from .step import Stepper

LossFn = Callable[[torch.nn.Module, Any], torch.Tensor]  # (model, a batch as the loader gives it)


def supervised(criterion: Callable) -> LossFn:
    """``loss_fn`` for (inputs, targets) batches: ``criterion(model(x), y)``."""
    def loss_fn(model, batch):
        x, y = batch
        return criterion(model(x), y)
    return loss_fn


def fit(model: torch.nn.Module, optimizer: torch.optim.Optimizer, train_loader, loss_fn: LossFn,
        *, run: fitoptions.RunOfAFit | None = None, epochs: int = 1, val_loader=None, evaluate: Callable | None = None,
        scheduler=None, scheduler_interval: str = "step", speed: Speed | None = None,
        accumulate: int = 1, clip_grad_norm: float | None = None, checkpoints=None,
        early_stopping: EarlyStopping | None = None, on_step_end: Callable | None = None,
        on_epoch_end: Callable | None = None, max_steps: int | None = None, limit_batches: int | None = None,
        progress: bool = True, monitor: bool | Monitor = True, ema: Ema | None = None) -> FitResult:
    """Train ``model`` and return its history; resumable at any optimizer step.

    What to train:
        loss_fn: ``loss_fn(model, batch) -> scalar loss``, the mean over the batch's samples;
            the batch is already on the device. ``supervised(criterion)`` builds one for
            (x, y) batches.
        run: the run context (``kk.start``'s) decides what is not the fit's to choose: this
            rank's device, the precision decided for the card, ``force_retrain`` (resume or
            start over), the session's deadline, the config, the sandbox's work cap. Outside a
            notebook's run: ``kk.Alone(device=, precision=, resume=, time_budget=)``; None is
            ``Alone()``.
        epochs: passes over ``train_loader`` (the ``make_loader`` sampler makes a mid-epoch
            resume continue with the very next batch). Run control: a finished run asked for
            more epochs trains on from its last checkpoint (``schedule``).
        val_loader / evaluate: per-epoch validation; ``evaluate(model) -> dict`` wins, else
            the mean loss over ``val_loader``'s samples is recorded as ``val_loss``.
        scheduler / scheduler_interval: any torch scheduler, stepped per "step" or "epoch",
            built for this fit's length.
    Speed:
        speed: a ``Speed`` (precision, torch.compile, CUDA graphs, cuDNN autotuning, the
            out-of-memory back-off); default: the kit's choices and the run's precision.
        accumulate: micro-batches per optimizer step (DDP syncs only the last).
        clip_grad_norm: max global norm of the unscaled gradients.
    Durability:
        checkpoints: a unit's (``unit.checkpoints()``: the fit raises ``kk.Unfinished`` when
            the session's deadline cuts it short, after saving), a CheckpointManager, a name
            (the run's ``checkpoints/<name>``), or None. They carry the config and what a
            checkpoint holds (``save_frozen``) and how often a fit saves between epochs
            (``save_every_min``: 0 at every decision, None at epoch ends only; a run's and a
            unit's take the notebook's parameter ``save_every_min``, else 20 minutes).
    Watch:
        early_stopping: an ``EarlyStopping``.
        on_step_end / on_epoch_end: ``hook(state: LoopState)``; may call
            ``state.request_stop()`` or ``state.request_checkpoint()``.
        max_steps / limit_batches: cap optimizer steps in total / batches per epoch.
        progress: a bar when watched, a line per epoch in batch runs.
        monitor: a ``Monitor`` (step phases timed, GPUs sampled), True for the defaults,
            False for neither.
        ema: an ``Ema``: a moving average of the weights beside the training, in every
            checkpoint, validated on when asked; after the fit ``ema.model``.
    """
    if scheduler_interval not in ("step", "epoch"):
        raise ValueError(f"scheduler_interval={scheduler_interval!r} must be 'step' or 'epoch'")
    if accumulate < 1:
        raise ValueError(f"accumulate={accumulate} must be >= 1")
    run = run if run is not None else Alone()
    speed = speed or Speed()
    validation.refuse_empty(train_loader)
    device = run.place.device
    ascard.confine(device)  # KAGGLEKIT_AS=t4: the T4's memory, no TF32 (nothing otherwise)
    durability = fitoptions.Durability.of(checkpoints, run)
    watch = Watch(early_stopping, on_step_end, on_epoch_end, max_steps, limit_batches, progress,
                  fitoptions.monitor_of(monitor))
    steps = Steps(epochs, scheduler, scheduler_interval, accumulate, clip_grad_norm, ema)
    with _cudnn_benchmark(speed.cudnn_benchmark and device.type == "cuda"):
        result = _fit(model, optimizer, train_loader, loss_fn, run, val_loader, evaluate, device,
                      steps, speed, durability, fitoptions.capped(watch, run.work_cap))
    if device.type == "cuda":  # the allocator's cached blocks back to the card: the next model of
        torch.cuda.empty_cache()  # this process (a notebook training several in turn) starts clean
    if result.stopped == Stop.TIME_BUDGET and durability.unit and durability.checkpoints is not None:
        raise Unfinished(f"{durability.checkpoints.root.name}: the session's time ran out at step "
                         f"{result.steps}; saved {result.checkpoint}: the next session resumes it")
    if result.stopped == Stop.TIME_BUDGET and partial_unwanted():  # a search trial's fit
        raise Unfinished(f"the session's time ran out at step {result.steps} of a search trial's fit")
    return result


@dataclass(frozen=True)
class Steps:
    """What one optimizer step is: the epochs, the schedule, accumulation, clipping and the
    weights' average it updates."""
    epochs: int
    scheduler: object
    scheduler_interval: str
    accumulate: int
    clip_grad_norm: float | None
    ema: Ema | None = None


def _precision(speed, run: fitoptions.RunOfAFit, device: torch.device):
    """The run's precision, decided once at ``kk.start`` for this card; another only when
    asked for (``Speed(precision=)``) or when the fit runs on another kind of device."""
    chosen = run.precision
    if speed.precision is None and not isinstance(chosen, str) and chosen.device_type == device.type:
        return chosen
    default = chosen if isinstance(chosen, str) else run.config.get("precision", "auto")
    return precision_mod.resolve(speed.precision or default, device)


def _fit(model, optimizer, train_loader, loss_fn, run: fitoptions.RunOfAFit, val_loader, evaluate, device, steps,
         speed, durability, watch) -> FitResult:
    started = time.monotonic()
    amp = precision_mod.Amp(_precision(speed, run, device))
    if not _spread(model) and any(t.device != device for t in itertools.chain(model.parameters(), model.buffers())):
        model.to(device)  # a walk over every tensor: skipped when all are there (each fit of a search)
    trained = ranks.wrap(model, device, run.place.strategy)
    graphs = cudagraph.for_fit(trained, speed.cuda_graphs, device)
    averaged = Averaged(trained, steps.ema) if steps.ema is not None else None
    parts = Parts(trained, optimizer, steps.scheduler, amp, device, ema=averaged)
    keeper = Durable(parts, durability.checkpoints, config=durability.config,
                     early_stopping=watch.early_stopping, save_frozen=durability.save_frozen)
    stepper = Stepper(parts, loss_fn, accel.Compiled(trained, speed.compile), graphs,
                      clip_grad_norm=steps.clip_grad_norm, oom_backoff=speed.oom_backoff,
                      min_batch=speed.min_batch)
    validate = validation.validation(parts, evaluate, val_loader, loss_fn, watch.limit_batches,
                                     speed.oom_backoff)
    loop = EpochLoop(parts, keeper, stepper, train_loader, epochs=steps.epochs,
                     scheduler_interval=steps.scheduler_interval, validate=validate,
                     accumulate=steps.accumulate, watch=watch, durability=durability)
    length = schedule.Length(steps.epochs, watch.max_steps, loop.per_epoch, steps.accumulate)
    schedule.check_room(steps.scheduler, steps.scheduler_interval, length)
    built = schedule.Start(steps.scheduler, optimizer)
    finished = keeper.resume(train_loader, enabled=durability.resume, length=length, start=built)
    keeper.after_restart()  # a restart after a rank ran out of memory: its smaller batches
    parts.state.length = parts.state.length or length.as_dict()
    if not finished:  # precision="auto": the faster of fp32 and the card's mixed precision
        planned = min(length.steps, watch.max_steps or length.steps)  # the sandbox's cap too
        probe.settle(parts, loss_fn, train_loader, steps.clip_grad_norm, planned)
    start_step, loop_started = parts.state.step, time.monotonic()
    sampler = monitor.GPUSampler()
    if watch.monitor.gpu and device.type == "cuda" and ranks.is_main() and not finished:
        sampler.start()
    bar = progress_bar(length.steps, "train", enabled=watch.progress and ranks.is_main(),
                       initial=parts.state.step)
    try:
        graphs.install()
        with signals.Interrupts():  # Stop button / SIGTERM: save after this step, then stop
            stopped = Stop.ALREADY_COMPLETE if finished else loop.run(bar)
    finally:
        bar.close()
        sampler.stop()
        graphs.remove()
    if stopped is Stop.INTERRUPTED:
        raise signals.Interrupted(f"stopped on request at step {parts.state.step}; the run resumes "
                                  f"from {keeper.last_checkpoint or 'its start'} when started again")
    st, world = parts.state, ranks.world_size()
    rate = st.samples / max(time.monotonic() - loop_started, 1e-9)
    return FitResult(history=st.history, steps=st.step, epochs=st.epoch, stopped=stopped,
                     seconds=time.monotonic() - started, precision=parts.amp.name,
                     precision_events=list(st.precision_events), precision_probe=dict(st.precision_choice),
                     compile=stepper.compiled.status,
                     cuda_graphs=graphs.status, resumed_from=keeper.resumed_from,
                     checkpoint=keeper.last_checkpoint, steps_this_session=st.step - start_step,
                     world_size=world, samples_per_s=rate * world, oom_events=list(st.oom_events),
                     breakdown=loop.timer.summary(), gpu=sampler.summary(),
                     gpu_samples=sampler.samples, session=run.session,
                     extended=keeper.extended,
                     loader_workers=getattr(train_loader, "num_workers", 0))


def _spread(model) -> bool:
    """Layers placed on several devices (transformers' ``device_map``, a model too big for one
    GPU): left where they are, the batch goes to ``device`` (the first layer's)."""
    placed = getattr(ranks.unwrap(model), "hf_device_map", None) or {}
    return len(set(placed.values())) > 1


@contextlib.contextmanager
def _cudnn_benchmark(enabled: bool):
    """cuDNN's kernel autotuning for this fit only (fixed shapes), set back afterwards."""
    previous = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = enabled or previous
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = previous
