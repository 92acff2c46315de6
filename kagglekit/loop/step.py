"""One optimizer step: micro-batches, gradient sync, clipping, scaler, OOM back-off.

``Stepper`` is the step ``fit`` takes; the functions below are its parts.

Two ways to sync gradients under DDP:
- "ddp": DDP's hooks all-reduce during the last micro-batch's backward (overlapping
  communication with compute); the other micro-batches run inside ``no_sync``.
- "manual": every micro-batch runs inside ``no_sync`` and the gradients are
  all-reduced afterwards. Slower (no overlap), but no rank is ever stuck inside a
  collective when another rank runs out of memory, so the ranks can agree on a
  smaller batch together (the OOM back-off).
"""
from __future__ import annotations

import contextlib
import functools
import gc

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from ..parallel import ranks

OOM_ERRORS = (torch.cuda.OutOfMemoryError,)
_SYNC = contextlib.nullcontext()  # gradients sync as usual (one stateless object for every step)


class OutOfMemoryFloor(RuntimeError):
    """Out of memory even at the smallest per-GPU batch allowed."""


def batch_size(batch) -> int:
    """Samples in a batch: the first dimension of its first tensor (or its batch_size)."""
    if isinstance(batch, torch.Tensor):  # the common cases first: this runs every step
        return batch.shape[0]
    if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], torch.Tensor):
        return batch[0].shape[0]
    if isinstance(getattr(batch, "batch_size", None), int):  # a sampled PyG subgraph
        return batch.batch_size
    if isinstance(getattr(batch, "num_graphs", None), int):  # a PyG Batch of graphs
        return batch.num_graphs
    if isinstance(batch, torch.Tensor):
        return batch.shape[0]
    if isinstance(batch, (list, tuple)) and batch:
        return batch_size(batch[0])
    if isinstance(batch, dict) and batch:
        return batch_size(next(iter(batch.values())))
    return 1


def split_batch(batch, parts: int) -> list:
    """Cut a batch into ``parts`` chunks along dim 0 (tensors in tuples, lists, dicts),
    a PyG node batch by its seed nodes, a PyG ``Batch`` of graphs by graph."""
    if parts == 1:
        return [batch]
    if isinstance(getattr(batch, "batch_size", None), int) and hasattr(batch, "edge_index"):
        from ..readers.graph import split_seeds
        return split_seeds(batch, parts)
    if hasattr(batch, "to_data_list") and isinstance(getattr(batch, "num_graphs", None), int):
        return [type(batch).from_data_list(batch.index_select(ids))
                for ids in torch.arange(batch.num_graphs).tensor_split(parts)]
    if isinstance(batch, torch.Tensor):
        return list(torch.tensor_split(batch, parts))
    if isinstance(batch, (list, tuple)):
        columns = [split_batch(b, parts) for b in batch]
        return [type(batch)(col[i] for col in columns) if not hasattr(batch, "_fields")
                else type(batch)(*(col[i] for col in columns)) for i in range(parts)]
    if isinstance(batch, dict):
        columns = {k: split_batch(v, parts) for k, v in batch.items()}
        return [{k: v[i] for k, v in columns.items()} for i in range(parts)]
    raise TypeError(f"cannot split a batch of type {type(batch).__name__} for OOM back-off: "
                    "give it a batch_size (seed nodes first) or pass oom_backoff=False")


@functools.lru_cache(maxsize=None)
def _is_ddp(cls: type) -> bool:
    """DDP's class check, once per model class: DDP is an ABC (``Joinable``), so
    ``isinstance`` takes abc's slow path, on every step."""
    return issubclass(cls, torch.nn.parallel.DistributedDataParallel)


def backward(model, batches: list, loss_fn, policy, scaler, *, split: int = 1,
             sync: str = "ddp", graphs=None) -> torch.Tensor:
    """Forward and backward over ``batches`` (each cut into ``split`` chunks).

    Returns the mean loss (detached). Gradients are averaged as if the whole group
    were one batch. ``graphs``: an active ``cudagraph.GraphedModel`` on ``model``.
    """
    chunks = batches if split == 1 else [c for b in batches for c in split_batch(b, split)]
    can_skip_sync = _is_ddp(type(model))
    n, total = len(chunks), None
    for i, chunk in enumerate(chunks):
        quiet = can_skip_sync and (sync == "manual" or i < n - 1)
        if graphs is not None:
            graphs.begin_pass(first=i == 0)
        with model.no_sync() if quiet else _SYNC:
            with policy.autocast(cache=graphs is None):
                loss = loss_fn(model, chunk)
                if n > 1:  # mean over the group, as one big batch would give
                    loss = loss / n
            scaler.scale(loss).backward()
        # With several chunks the loss is a fresh tensor (divided above), so a graph
        # replay of the next chunk cannot overwrite what ``total`` holds.
        total = loss.detach() if total is None else total + loss.detach()
    if graphs is not None and n == 1:
        total = total.clone()  # the loss outlives this step; a replay may reuse its buffer
    return total.float()


def all_reduce_gradients(model, bucket_mb: float = 25.0) -> None:
    """Average gradients over ranks in flat buckets (the "manual" sync)."""
    world = dist.get_world_size()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    limit = int(bucket_mb * 2**20)
    bucket, size = [], 0
    for g in grads + [None]:
        if g is not None and (not bucket or (size + g.numel() * g.element_size() <= limit
                                              and g.dtype == bucket[0].dtype)):
            bucket.append(g)
            size += g.numel() * g.element_size()
            continue
        if bucket:
            flat = _flatten_dense_tensors(bucket)
            dist.all_reduce(flat)
            flat /= world
            for dst, src in zip(bucket, _unflatten_dense_tensors(flat, bucket)):
                dst.copy_(src)
        bucket, size = ([g], g.numel() * g.element_size()) if g is not None else ([], 0)


def apply(model, optimizer, scaler, clip_grad_norm: float | None) -> None:
    """Clip (unscaled), step, update the scaler, clear the gradients."""
    if clip_grad_norm is not None:
        scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)


def free_after_oom(optimizer) -> None:
    """Drop what the failed step held so the retry starts from a clean slate."""
    optimizer.zero_grad(set_to_none=True)
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


class Stepper:
    """One optimizer step of ``parts`` over a group of micro-batches, backing off on OOM.

    Runs the forward/backward through ``compiled`` (torch.compile with its eager
    fallback) and ``graphs`` (CUDA-graph replay, when active). On CUDA out-of-memory
    every rank agrees to cut each batch in two (same effective batch) and retries.
    """

    def __init__(self, parts, loss_fn, compiled, graphs, *, clip_grad_norm=None,
                 oom_backoff: bool = True, min_batch: int = 1):
        self.parts, self.loss_fn, self.compiled = parts, loss_fn, compiled
        self.graphs = graphs  # active once fit installs it
        self.clip_grad_norm, self.oom_backoff, self.min_batch = clip_grad_norm, oom_backoff, min_batch
        # Manual gradient sync under DDP: no rank sits in a collective while another OOMs.
        self.sync = "manual" if oom_backoff and ranks.distributed() else "ddp"

    def __call__(self, micro: list, timer) -> torch.Tensor:
        p = self.parts
        while True:
            try:
                loss = self.compiled.run(self._backward, micro)
                oom = False
            except OOM_ERRORS:
                if not self.oom_backoff:
                    raise
                oom = True
            if self.sync == "manual":
                oom = ranks.agree([oom], p.device)[0]
            if not oom:
                break
            self.back_off(micro)
        timer.mark("compute")
        if self.sync == "manual":
            all_reduce_gradients(p.model)
        apply(p.model, p.optimizer, p.scaler, self.clip_grad_norm)
        timer.mark("optimizer")
        return loss

    def _backward(self, model, micro: list) -> torch.Tensor:
        p = self.parts
        return backward(model, micro, self.loss_fn, p.precision, p.scaler, split=p.state.split,
                        sync=self.sync, graphs=self.graphs if self.graphs.active else None)

    def back_off(self, micro: list) -> None:
        state = self.parts.state
        free_after_oom(self.parts.optimizer)
        per_gpu = batch_size(micro[0]) // state.split
        if per_gpu // 2 < self.min_batch:
            raise OutOfMemoryFloor(
                f"CUDA out of memory even at a per-GPU batch of {per_gpu} (floor "
                f"min_batch={self.min_batch}). Use a smaller model, precision='fp16'/'bf16', "
                "accel.checkpoint_blocks(), or a shorter input.")
        state.split *= 2
        state.oom_events.append({"step": state.step, "per_gpu_batch": per_gpu // 2})
        if ranks.is_main():
            print(f"kagglekit: CUDA out of memory at step {state.step}; every rank now runs "
                  f"per-GPU batches of {per_gpu // 2} (split x{state.split}, same "
                  "effective batch)", flush=True)
