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

import torch

from ..machine import ascard, precision as precision_mod, signals
from ..parallel import ranks
from . import accel, cudagraph, fitoptions, monitor, schedule, validation
from .durable import Durable
from .epochs import EpochLoop
from .fitoptions import Stop
from .fitstate import EarlyStopping, FitResult, Parts  # noqa: F401 (kk.EarlyStopping, kk.FitResult)
from .progress import bar as progress_bar
from .step import Stepper

LossFn = Callable[[torch.nn.Module, object], torch.Tensor]


def supervised(criterion: Callable) -> LossFn:
    """``loss_fn`` for (inputs, targets) batches: ``criterion(model(x), y)``."""
    def loss_fn(model, batch):
        x, y = batch
        return criterion(model(x), y)
    return loss_fn


def fit(model: torch.nn.Module, optimizer: torch.optim.Optimizer, train_loader, loss_fn: LossFn,
        *, run=None, epochs: int = 1, val_loader=None, evaluate: Callable | None = None,
        scheduler=None, scheduler_interval: str = "step", device=None,
        precision=None, compile="off", cuda_graphs: str = "off", cudnn_benchmark: bool = True,
        accumulate: int = 1, clip_grad_norm: float | None = None, oom_backoff: bool = True,
        min_batch: int = 1,
        checkpoints=None, save_every_min: float | None = 20.0, resume: bool | None = None,
        time_budget=None, config: dict | None = None, save_frozen: bool = True,
        early_stopping: EarlyStopping | None = None, on_step_end: Callable | None = None,
        on_epoch_end: Callable | None = None, max_steps: int | None = None,
        limit_batches: int | None = None, progress: bool = True, profile_every: int = 25,
        monitor_gpu: bool = True) -> FitResult:
    """Train ``model`` and return its history; resumable at any optimizer step.

    What to train:
        loss_fn: ``loss_fn(model, batch) -> scalar loss``, the mean over the batch's samples;
            the batch is already on the device. ``supervised(criterion)`` builds one for
            (x, y) batches.
        run: the run context (``kk.start``'s): the precision decided for the card,
            ``force_retrain``, the session's deadline, the config and its run-control keys,
            this rank's device, the sandbox's work cap. Without it: "auto" precision, resume,
            no deadline (Kaggle's session limit on Kaggle).
        epochs: passes over ``train_loader`` (the ``make_loader`` sampler makes a mid-epoch
            resume continue with the very next batch). Run control: a finished run asked for
            more epochs trains on from its last checkpoint (``schedule``).
        val_loader / evaluate: per-epoch validation; ``evaluate(model) -> dict`` wins, else
            the mean loss over ``val_loader`` is recorded as ``val_loss``.
        scheduler / scheduler_interval: any torch scheduler, stepped per "step" or "epoch",
            built for this fit's length.
        device: default: the run's (cuda:<rank> under ``kk.launch``), else cuda:LOCAL_RANK
            where there is a GPU, else the CPU.
    Speed:
        precision: "auto" (bf16 on compute capability >= 8.0, fp16 + GradScaler on 7.x, fp32
            on CPU), "fp32", "fp16", "bf16" or a ``Precision``; None: the run's.
        compile: "off", "auto" (torch.compile, eager on failure), "strict", or a dict of
            torch.compile options.
        cuda_graphs: "off", "auto" or "strict": capture the training forward and backward at
            the first step and replay them (small, launch-bound models); steps of another
            shape run eagerly.
        cudnn_benchmark: cuDNN times its kernels for the fit's shapes (set back afterwards).
        accumulate: micro-batches per optimizer step (DDP syncs only the last).
        clip_grad_norm: max global norm of the unscaled gradients.
        oom_backoff / min_batch: on CUDA out-of-memory cut each batch in two (same effective
            batch, the same gradient) down to ``min_batch`` per GPU (see ``step``).
    Durability:
        checkpoints: a CheckpointManager, a name (the run's ``checkpoints/<name>``), or None.
        save_every_min: minutes between mid-epoch saves (0: at every decision; None: epoch
            ends only).
        resume: continue from the newest checkpoint of this run's identity (working dir or
            inputs); False deletes them and starts over; None: the run's ``force_retrain``.
        time_budget: seconds or a Budget; None: the run's, else Kaggle's session limit on
            Kaggle. The loop stops with a checkpoint first.
        config: in every checkpoint's sidecar and the run's identity (None: the run's config).
        save_frozen: False: checkpoints hold only the parameters that train (LoRA adapters, a
            head) and the buffers; the frozen base comes from the model each run loads, so
            name the base in ``config`` (``readers.pretrained.base_identity``).
    Watch:
        early_stopping: an ``EarlyStopping``.
        on_step_end / on_epoch_end: ``hook(state: LoopState)``; may call
            ``state.request_stop()`` or ``state.request_checkpoint()``.
        max_steps / limit_batches: cap optimizer steps in total / batches per epoch.
        progress: a bar when watched, a line per epoch in batch runs.
        profile_every: time the phases of one step in this many (``monitor``).
        monitor_gpu: sample the GPUs through NVML (rank 0, on GPU).
    """
    if scheduler_interval not in ("step", "epoch"):
        raise ValueError(f"scheduler_interval={scheduler_interval!r} must be 'step' or 'epoch'")
    speed, durability, watch = fitoptions.from_keywords(locals())
    validation.refuse_empty(train_loader)
    device = torch.device(device) if device is not None else (
        run.device if run is not None else ranks.default_device())
    ascard.confine(device)  # KAGGLEKIT_AS=t4: the T4's memory, no TF32 (nothing otherwise)
    with _cudnn_benchmark(speed.cudnn_benchmark and device.type == "cuda"):
        return _fit(model, optimizer, train_loader, loss_fn, run, epochs, val_loader, evaluate,
                    scheduler, scheduler_interval, device, speed, durability.resolved(run),
                    fitoptions.capped(watch, run.work_cap if run else None))


def _precision(speed, run, device: torch.device):
    """The run's precision, decided once at ``kk.start`` for this card; another only when
    asked for (``precision=``) or when the fit runs on another kind of device."""
    if speed.precision is None and run is not None and run.precision.device_type == device.type:
        return run.precision
    return precision_mod.resolve(speed.precision or (run.config.get("precision", "auto")
                                                     if run else "auto"), device)


def _fit(model, optimizer, train_loader, loss_fn, run, epochs, val_loader, evaluate, scheduler,
         scheduler_interval, device, speed, durability, watch) -> FitResult:
    started = time.monotonic()
    amp = precision_mod.Amp(_precision(speed, run, device))
    if not _spread(model) and any(t.device != device for t in itertools.chain(model.parameters(), model.buffers())):
        model.to(device)  # a walk over every tensor: skipped when all are there (each fit of a search)
    trained = ranks.wrap(model, device, run.place.strategy if run is not None else "single")
    graphs = cudagraph.for_fit(trained, speed.cuda_graphs, device)
    parts = Parts(trained, optimizer, scheduler, amp, device)
    keeper = Durable(parts, durability.checkpoints, config=durability.config,
                     early_stopping=watch.early_stopping, save_frozen=durability.save_frozen)
    stepper = Stepper(parts, loss_fn, accel.Compiled(trained, speed.compile), graphs,
                      clip_grad_norm=speed.clip_grad_norm, oom_backoff=speed.oom_backoff,
                      min_batch=speed.min_batch)
    validate = validation.validation(parts, evaluate, val_loader, loss_fn, watch.limit_batches,
                                     speed.oom_backoff)
    loop = EpochLoop(parts, keeper, stepper, train_loader, epochs=epochs,
                     scheduler_interval=scheduler_interval, validate=validate,
                     accumulate=speed.accumulate, watch=watch, durability=durability)
    length = schedule.Length(epochs, watch.max_steps, loop.per_epoch, speed.accumulate)
    schedule.check_room(scheduler, scheduler_interval, length)
    built = schedule.Start(scheduler, optimizer)
    finished = keeper.resume(train_loader, enabled=durability.resume, length=length, start=built)
    keeper.after_restart()  # a restart after a rank ran out of memory: its smaller batches
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
                     precision_events=list(st.precision_events), compile=stepper.compiled.status,
                     cuda_graphs=graphs.status, resumed_from=keeper.resumed_from,
                     checkpoint=keeper.last_checkpoint, steps_this_session=st.step - start_step,
                     world_size=world, samples_per_s=rate * world, oom_events=list(st.oom_events),
                     breakdown=loop.timer.summary(), gpu=sampler.summary(),
                     gpu_samples=sampler.samples, session=run.session if run else "",
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
