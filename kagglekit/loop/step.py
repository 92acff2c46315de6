"""One optimizer step: micro-batches, DDP's gradient sync, clipping, scaler, OOM back-off.

``Stepper`` is the step ``fit`` takes; the functions below are its parts.

Under DDP the gradients are synchronised by DDP itself: its buckets all-reduce during the last
chunk's backward, overlapping communication with compute, and every earlier chunk (the
accumulation micro-batches, the OOM back-off's chunks) runs inside ``no_sync``. The ranks agree
on nothing per step: no extra collective, no host sync.

Out of CUDA memory, the step is retried with each batch cut in two (``batches.split_batch``;
each chunk's loss weighted by its share of the samples, so the gradient is the unsplit
step's):
- in one process, in place;
- under DDP a rank cannot retry alone: the others may already wait in the step's all-reduce.
  It raises ``RankOutOfMemory``; ``fit`` saves the state the step started from (a checkpoint of
  the rank's own name, the smaller batch recorded) and asks ``kk.launch`` to restart every rank
  from it (under torchrun, ``--max-restarts`` restarts them). A run where no rank runs out pays
  nothing for this.
"""
from __future__ import annotations

import contextlib
import functools
import gc

import torch

from ..parallel import ranks
from ..parallel.batches import batch_size, chunk_weights, split_batch
from .scalerhealth import ScalerWatch

OOM_ERRORS = (torch.cuda.OutOfMemoryError,)
_SYNC = contextlib.nullcontext()  # gradients sync as usual (one stateless object for every step)


class OutOfMemoryFloor(RuntimeError):
    """Out of memory even at the smallest per-GPU batch allowed."""


class RankOutOfMemory(RuntimeError):
    """A DDP rank ran out of memory: the run restarts with each batch cut in ``split``."""

    def __init__(self, event: dict, split: int):
        super().__init__(f"rank {event['rank']} ran out of CUDA memory at step {event['step']}")
        self.event, self.split = event, split


@functools.cache
def _is_ddp(cls: type) -> bool:
    """DDP's class check, once per model class: DDP is an ABC (``Joinable``), so
    ``isinstance`` takes abc's slow path, on every step."""
    return issubclass(cls, torch.nn.parallel.DistributedDataParallel)


def _chunks(batches: list, split: int) -> tuple[list, list]:
    """The step's chunks and the weight of each one's loss (1 / micro-batches when unsplit)."""
    if split == 1:
        return batches, [None] * len(batches)
    chunks, weights = [], []
    for b in batches:
        parts = split_batch(b, split)
        chunks += parts
        weights += [w / len(batches) for w in chunk_weights(b, parts)]
    return chunks, weights


def backward(model, batches: list, loss_fn, policy, scaler, *, split: int = 1,
             graphs=None) -> torch.Tensor:
    """Forward and backward over ``batches`` (each cut into ``split`` chunks).

    Returns the mean loss (detached). Gradients are averaged as if the whole group were one
    batch; under DDP only the last chunk's backward synchronises them. ``graphs``: an active
    ``cudagraph.GraphedModel`` on ``model``.
    """
    chunks, weights = _chunks(batches, split)
    can_skip_sync = _is_ddp(type(model))  # type: ignore[arg-type]  # a class is hashable
    n, total = len(chunks), None
    for i, (chunk, weight) in enumerate(zip(chunks, weights)):
        if graphs is not None:
            graphs.begin_pass(first=i == 0)
        with model.no_sync() if can_skip_sync and i < n - 1 else _SYNC:
            with policy.autocast(cache=graphs is None):
                loss = loss_fn(model, chunk)
                if weight is not None:  # a chunk: its share of the group's samples
                    loss = loss * weight
                elif n > 1:  # mean over the group, as one big batch would give
                    loss = loss / n
            scaler.scale(loss).backward()
        # With several chunks the loss is a fresh tensor (scaled above), so a graph
        # replay of the next chunk cannot overwrite what ``total`` holds.
        total = loss.detach() if total is None else total + loss.detach()
    assert total is not None, "a step has at least one chunk"
    if graphs is not None and n == 1:
        total = total.clone()  # the loss outlives this step; a replay may reuse its buffer
    return total.float()


def apply(model, optimizer, scaler, clip_grad_norm: float | None) -> None:
    """Clip (unscaled), step, update the scaler, clear the gradients."""
    if clip_grad_norm is not None:
        scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)


def free_after_oom(optimizer) -> None:
    """Drop what the failed step held so the retry starts from a clean slate. Called outside the
    ``except`` block: inside it, the traceback still holds the failed step's frames and the
    activations they reference, and nothing would be freed."""
    optimizer.zero_grad(set_to_none=True)
    gc.collect()
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


class _Attempt:
    """One try at a step: where it ran out of memory, if it did ("forward/backward" or
    "optimizer"), and whether the optimizer held any state before it."""

    def __init__(self, optimizer):
        self.optimizer, self.failed = optimizer, None
        self.first = not optimizer.state  # its first step: Adam's moments are allocated now

    def drop_new_state(self) -> bool:
        """After an out-of-memory error in the optimizer: forget the states its first step was
        creating and say True, when that step can be taken again exactly (no state has begun
        its update: every one has a ``step`` of 0). Otherwise some weights may be updated already:
        False."""
        states = list(self.optimizer.state.values())
        started = any(float(s.get("step", 1)) > 0 for s in states)
        if not self.first or started:
            return False
        self.optimizer.state.clear()
        return True


class Stepper:
    """One optimizer step of ``parts`` over a group of micro-batches, backing off on OOM.

    Runs the forward/backward through ``compiled`` (torch.compile with its eager
    fallback) and ``graphs`` (CUDA-graph replay, when active).
    """

    def __init__(self, parts, loss_fn, compiled, graphs, *, clip_grad_norm=None,
                 oom_backoff: bool = True, min_batch: int = 1):
        self.parts, self.loss_fn, self.compiled = parts, loss_fn, compiled
        self.graphs = graphs  # active once fit installs it
        self.clip_grad_norm, self.oom_backoff, self.min_batch = clip_grad_norm, oom_backoff, min_batch
        self.distributed = ranks.distributed()
        self.scaler_watch = ScalerWatch()  # the steps fp16's scaler skipped, counted on the device

    def __call__(self, micro: list, timer) -> torch.Tensor:
        while True:
            attempt = _Attempt(self.parts.optimizer)
            loss = self._try(micro, timer, attempt)
            if attempt.failed is None:
                return loss
            # Here, out of the except block, the failed step's frames are gone.
            if attempt.failed == "optimizer" and not attempt.drop_new_state():
                raise OutOfMemoryFloor(
                    f"CUDA out of memory inside the optimizer's update at step {self.parts.state.step}: "
                    "its state was partly updated, so the step cannot be taken again. The run "
                    "resumes from its last checkpoint when started again; give it room with a "
                    "smaller batch, a lighter optimizer (SGD, Adafactor) or fewer trained weights.")
            scaled = getattr(self.parts.amp.scaler, "_per_optimizer_states", None)  # fp16 only
            if attempt.failed == "optimizer" and scaled is not None:
                scaled.clear()  # unscale_ ran: the retry's gradients need theirs unscaled too
            self.back_off(micro, attempt.failed)

    def _try(self, micro: list, timer, attempt: _Attempt):
        p = self.parts
        attempt.failed = "forward/backward"
        try:
            loss = self.compiled.run(self._backward, micro)
            timer.mark("compute")
            attempt.failed = "optimizer"
            self.scaler_watch.before_step(p.amp.scaler)
            apply(p.model, p.optimizer, p.amp.scaler, self.clip_grad_norm)
            self.scaler_watch.after_step(p.amp.scaler)
            timer.mark("optimizer")
            attempt.failed = None
            return loss
        except OOM_ERRORS:
            if not self.oom_backoff:
                raise
            return None

    def _backward(self, model, micro: list) -> torch.Tensor:
        p = self.parts
        return backward(model, micro, self.loss_fn, p.amp, p.amp.scaler, split=p.state.split,
                        graphs=self.graphs if self.graphs.active else None)

    def back_off(self, micro: list, where: str = "forward/backward") -> None:
        """Cut each batch in two more chunks (here), or ask for a restart (under DDP)."""
        state = self.parts.state
        free_after_oom(self.parts.optimizer)
        per_gpu = batch_size(micro[0]) // state.split
        if per_gpu // 2 < self.min_batch:
            extra = (" The optimizer's own state does not fit beside the model: a lighter optimizer "
                     "(SGD, Adafactor), fewer trained weights (LoRA), or fp16 weights."
                     if where == "optimizer" else "")
            raise OutOfMemoryFloor(
                f"CUDA out of memory ({where}) even at a per-GPU batch of {per_gpu} (floor "
                f"min_batch={self.min_batch}). Use a smaller model, precision='fp16'/'bf16', "
                f"accel.checkpoint_blocks(), or a shorter input.{extra}")
        event = {"step": state.step, "per_gpu_batch": per_gpu // 2}
        if where == "optimizer":
            event["in"] = "optimizer"
        if self.distributed:
            raise RankOutOfMemory({**event, "rank": ranks.rank()}, state.split * 2)
        state.split *= 2
        state.oom_events.append(event)
        print(f"kagglekit: CUDA out of memory ({where}) at step {state.step}; now per-GPU batches "
              f"of {per_gpu // 2} (split x{state.split}, same effective batch)", flush=True)
