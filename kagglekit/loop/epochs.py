"""The loop ``fit`` runs: epochs of optimizer steps, and the decisions taken between steps.

    for each epoch: position the loader, take optimizer steps (each: read, copy, step, hooks,
    decide to stop or save) -> close the epoch (evaluate, schedule, early-stop, save)
    -> the final save.

Under DDP the ranks decide together every ``AGREE_EVERY`` steps, in one collective (the
non-finite loss check, the time budget, a hook's stop, a due save, the Stop button); between
those steps they agree on nothing.
"""
from __future__ import annotations

import time

import torch

from ..machine import signals
from ..parallel import loaders, ranks
from ..parallel.batches import batch_size
from . import monitor
from .durable import RolledBack
from .fitoptions import Stop
from .fitstate import LoopState
from .step import RankOutOfMemory

AGREE_EVERY = 16  # steps between the non-finite check (a host sync) and, under DDP, decisions


class EpochLoop:
    """One fit's loop over ``loader``: ``run(bar)`` trains until a ``Stop``."""

    def __init__(self, parts, keeper, stepper, loader, *, epochs, scheduler_interval, validate,
                 accumulate: int, watch, durability):
        self.parts, self.keeper, self.stepper, self.loader = parts, keeper, stepper, loader
        self.epochs, self.scheduler_interval, self.validate = epochs, scheduler_interval, validate
        self.watch, self.durability, self.accumulate = watch, durability, accumulate
        self.step_s = 0.0  # moving average of one optimizer step
        self.distributed = ranks.distributed()
        self.every = AGREE_EVERY if self.distributed else 1  # steps between decisions
        self.timer = monitor.StepTimer(parts.device, watch.monitor.profile_every)
        n = len(loader)
        self.per_epoch = n if watch.limit_batches is None else min(n, watch.limit_batches)

    @property
    def state(self) -> LoopState:
        return self.parts.state  # replaced wholesale on resume and roll-back

    def run(self, bar) -> Stop:
        while True:
            try:
                stopped = None
                while self.state.epoch < self.epochs and stopped is None:
                    started = time.monotonic()
                    stopped = self.train_epoch(bar)
                    if stopped in (Stop.TIME_BUDGET, Stop.INTERRUPTED):
                        break  # no time to evaluate: the next session closes this epoch
                    stopped = self.close_epoch(started, bar) or stopped
                    if stopped is None and self.state.epoch < self.epochs:
                        self.keeper.save()
                stopped = stopped or Stop.COMPLETED
                self.state.stopped = stopped.value
                self.keeper.save(final=stopped not in (Stop.TIME_BUDGET, Stop.INTERRUPTED))
                return stopped
            except RolledBack:  # fp16 overflowed: the state went back; go on from there
                continue
            except RankOutOfMemory as oom:  # under DDP: save where the step started, restart
                raise self.keeper.save_for_restart(oom.event, oom.split) from None

    def train_epoch(self, bar) -> Stop | None:
        st, loader, device = self.state, self.loader, self.parts.device
        skip = loaders.start_epoch(loader, st.epoch, st.batches_done)  # before iter()
        batches = iter(loader)
        for _ in range(skip):
            loaders.next_batch(batches, loader)  # a loader that cannot seek: read ahead
        self.parts.model.train()
        per_step_scheduler = self.parts.scheduler if self.scheduler_interval == "step" else None
        while st.batches_done < self.per_epoch:
            timer = self.timer.for_step(st.step)  # the null timer on unsampled steps
            timer.mark("start")
            group = min(self.accumulate, self.per_epoch - st.batches_done)
            raw = [loaders.next_batch(batches, loader) for _ in range(group)]
            timer.mark("data_wait")
            micro = [loaders.to_device(b, device) for b in raw]
            timer.mark("h2d")
            started = time.monotonic()
            st.add_loss(self.stepper(micro, timer))
            seen = sum(batch_size(b) for b in micro)
            timer.record(st.step, seen)
            st.samples, st.epoch_samples = st.samples + seen, st.epoch_samples + seen
            st.batches_done, st.step = st.batches_done + group, st.step + 1
            if per_step_scheduler is not None:
                per_step_scheduler.step()
            if self.parts.ema is not None:
                self.parts.ema.update(self.parts.model)
            elapsed = time.monotonic() - started
            self.step_s = elapsed if self.step_s == 0 else 0.9 * self.step_s + 0.1 * elapsed
            bar.update(1)
            reason = self.after_step()
            if reason is not None:
                return reason
        return None

    def after_step(self) -> Stop | None:
        """Hooks, then the decisions to stop or save; a stop reason or None."""
        st, w = self.state, self.watch
        if w.on_step_end is not None:
            w.on_step_end(st)
        if w.max_steps is not None and st.step >= w.max_steps:
            return Stop.MAX_STEPS
        if st.step % self.every:
            return None
        # Room for the steps until the next decision and a save, with a safety factor (no
        # deadline: nothing to estimate).
        budget = self.durability.time_budget
        short = budget.deadline is not None and not budget.allows(
            2 * self.every * self.step_s + 2 * self.keeper.expected_save_s())
        flags = [short, st.stop_requested, self.keeper.due(self.durability.save_every_min),
                 signals.stop_requested()]
        if st.step % AGREE_EVERY == 0:  # under DDP every decision: one collective for all
            flags = self.keeper.check_finite(agree=self.distributed, also=flags)
        out_of_time, stop, save, interrupted = flags
        if interrupted or out_of_time or stop:
            return Stop.INTERRUPTED if interrupted else Stop.TIME_BUDGET if out_of_time else Stop.REQUESTED
        if save:
            self.keeper.save()
        return None

    def close_epoch(self, started: float, bar) -> Stop | None:
        """Evaluate, record, schedule, maybe early-stop."""
        st, p = self.state, self.parts
        if st.batches_done < self.per_epoch:
            return None  # stopped mid-epoch (max_steps, a request)
        self.keeper.check_finite(agree=True)  # before the epoch's loss goes into the history
        seconds = time.monotonic() - started
        record = {"epoch": st.epoch, "step": st.step,
                  "train_loss": float(st.summed_loss()) / max(st.loss_steps, 1),
                  "lr": p.optimizer.param_groups[0]["lr"], "seconds": round(seconds, 3),
                  "samples_per_s": round(st.epoch_samples * ranks.world_size() / max(seconds, 1e-9), 2),
                  **self.stepper.scaler_watch.epoch_record(p.amp.scaler), **_gpu_memory(p.device),
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
        return Stop.EARLY_STOPPING if stop else None


def _gpu_memory(device: torch.device) -> dict:
    """The card's memory at the epoch's end: what tensors hold now and the most they held
    (torch's allocator, in MB; no host sync): {} off a GPU."""
    if device.type != "cuda":
        return {}
    return {"gpu_allocated_mb": round(torch.cuda.memory_allocated(device) / 2**20, 1),
            "gpu_peak_mb": round(torch.cuda.max_memory_allocated(device) / 2**20, 1)}


def _postfix(record: dict) -> str:
    keys = [k for k in record if k not in ("epoch", "step", "lr", "seconds", "scale", "skipped_steps",
                                           "gpu_allocated_mb", "gpu_peak_mb")]
    return " ".join(f"{k}={record[k]:.4g}" for k in keys if isinstance(record[k], float))
